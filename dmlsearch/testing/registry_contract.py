"""The contract every :class:`~dmlsearch.registry.RegistryStore` must pass.

Subclass :class:`StoreContract` in a test module and override its ``store`` fixture::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            s = MyStore(tmp_path)
            yield s
            s.close()

Each test gets an empty store. Requires pytest (imported only by this module).
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest

from ..exceptions import DmlsearchError, InvalidParameterError
from ..registry._base import (
    COMPLETE,
    FAILED,
    RUNNING,
    TIMEOUT,
    AlreadyExistsError,
    ModelVersionRecord,
    NotFoundError,
    RegistryError,
    RegistryStore,
    TrialRecord,
)
from ..registry._checks import MAX_NAME

__all__ = ["POSTGRES_URL", "StoreContract", "make_trial", "postgres_schema"]

#: The PostgreSQL server the registry tests use unless ``DMLSEARCH_TEST_POSTGRES`` is set.
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def postgres_schema(url: str) -> Iterator[str]:
    """Yield a URL whose ``search_path`` is a fresh schema on ``url``'s server; drop it after.

    Gives each test its own empty database without creating databases. Fails the test
    (never skips) when the server cannot be reached.
    """
    import sqlalchemy as sa

    schema = f"dmls_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        pytest.fail(
            f"PostgreSQL is not reachable at {url} ({exc.orig}); start it or point "
            "DMLSEARCH_TEST_POSTGRES at a server. The registry tests never skip PostgreSQL.",
            pytrace=False,
        )
    try:
        scoped = sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield scoped.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def make_trial(experiment_id: int, number: int, **fields: Any) -> TrialRecord:
    """A completed trial with plausible fields; ``fields`` override any of them."""
    values: dict[str, Any] = {
        "state": COMPLETE,
        "params": {"C": 1.0, "kernel": "rbf"},
        "scores": {"score": [0.5, 0.6, 0.7]},
        "value": 0.6,
        "intermediate": {},
        "started": 1_700_000_000.0 + number,
        "finished": 1_700_000_001.5 + number,
        "duration": 1.5,
        "worker": "tcp://127.0.0.1:40000",
        "retries": 0,
        "error": None,
        "seed": number,
    }
    values.update(fields)
    return TrialRecord(experiment_id=experiment_id, number=number, **values)


def _version(store: RegistryStore, model: str = "clf", **fields: Any) -> ModelVersionRecord:
    values: dict[str, Any] = {
        "artifact_uri": f"memory://{uuid.uuid4().hex}",
        "sha256": uuid.uuid4().hex * 2,
        "format": "skops",
        "metrics": {"accuracy": 0.9},
        "signature": None,
        "lineage": {},
        "trusted_types": [],
    }
    values.update(fields)
    return store.create_model_version(model, **values)


class StoreContract:
    """Tests of every primitive of :class:`RegistryStore`; subclasses provide ``store``."""

    @pytest.fixture
    def store(self) -> Iterator[RegistryStore]:
        raise NotImplementedError("a StoreContract subclass must override the `store` fixture")

    # -- experiments -----------------------------------------------------------------------

    def test_create_and_get_experiment(self, store: RegistryStore) -> None:
        before = time.time()
        exp = store.create_experiment(
            "exp",
            config={"strategy": "tpe", "n_trials": 50},
            package_versions={"sklearn": "1.6.0"},
            data_fingerprint="abc123",
            cluster={"workers": 4, "threads": [2, 2, 2, 2]},
        )
        assert exp.name == "exp"
        assert exp.status == RUNNING
        assert before - 1 <= exp.created <= time.time() + 1
        assert exp.config == {"strategy": "tpe", "n_trials": 50}
        assert exp.package_versions == {"sklearn": "1.6.0"}
        assert exp.data_fingerprint == "abc123"
        assert exp.cluster == {"workers": 4, "threads": [2, 2, 2, 2]}
        assert store.get_experiment("exp") == exp
        assert store.get_experiment(exp.id) == exp

    def test_experiment_defaults(self, store: RegistryStore) -> None:
        exp = store.create_experiment("bare")
        assert (exp.config, exp.package_versions, exp.cluster) == ({}, {}, {})
        assert exp.data_fingerprint is None

    def test_duplicate_experiment_name(self, store: RegistryStore) -> None:
        store.create_experiment("exp")
        with pytest.raises(AlreadyExistsError, match="exp"):
            store.create_experiment("exp")
        assert len(store.list_experiments()) == 1

    def test_missing_experiment(self, store: RegistryStore) -> None:
        with pytest.raises(NotFoundError):
            store.get_experiment("nope")
        with pytest.raises(NotFoundError):
            store.get_experiment(12345)
        with pytest.raises(NotFoundError):
            store.set_experiment_status(12345, "finished")
        for call in (store.get_trials, store.count_trials, store.leaderboard):
            with pytest.raises(NotFoundError):
                call(12345)
        with pytest.raises(NotFoundError):
            store.record_trials(12345, [make_trial(12345, 0)])

    def test_error_hierarchy(self) -> None:
        assert issubclass(NotFoundError, RegistryError)
        assert issubclass(NotFoundError, KeyError)
        assert issubclass(AlreadyExistsError, RegistryError)
        assert issubclass(RegistryError, DmlsearchError)

    def test_list_experiments_in_creation_order(self, store: RegistryStore) -> None:
        names = ["b", "a", "c"]
        created = [store.create_experiment(n) for n in names]
        listed = store.list_experiments()
        assert [e.name for e in listed] == names
        assert [e.id for e in listed] == [e.id for e in created]
        assert len({e.id for e in listed}) == 3

    def test_set_experiment_status(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        store.set_experiment_status(exp.id, "finished")
        assert store.get_experiment(exp.id).status == "finished"

    def test_set_experiment_config(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp", config={"a": 1})
        store.set_experiment_config(exp.id, {"a": 2, "b": [1, 2]})
        assert store.get_experiment("exp").config == {"a": 2, "b": [1, 2]}
        with pytest.raises(NotFoundError):
            store.set_experiment_config(exp.id + 1000, {})

    def test_get_or_create_experiment(self, store: RegistryStore) -> None:
        first = store.get_or_create_experiment("exp", config={"a": 1})
        second = store.get_or_create_experiment("exp", config={"a": 2})
        assert first == second
        assert second.config == {"a": 1}

    def test_unicode_names(self, store: RegistryStore) -> None:
        name = "expérience-β 実験 🚀"
        exp = store.create_experiment(name, config={"clé": "värde"})
        assert store.get_experiment(name).config == {"clé": "värde"}
        store.record_trials(exp.id, [make_trial(exp.id, 0, params={"λ": "ünïcode"})])
        assert store.get_trials(exp.id)[0].params == {"λ": "ünïcode"}
        model = "modèle-λ"
        _version(store, model)
        store.set_alias(model, "champion-🏆", 1)
        store.set_tag(model, 1, "équipe", "données")
        got = store.get_model_version(model, alias="champion-🏆")
        assert got.tags == {"équipe": "données"}
        assert model in store.list_models()

    # -- trials ----------------------------------------------------------------------------

    def test_trial_roundtrip(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        trial = make_trial(
            exp.id,
            3,
            state=FAILED,
            value=None,
            scores={"acc": [0.1, 0.2], "f1": [float("nan"), 0.5]},
            intermediate={"10": 0.3, "30": 0.5},
            worker="tcp://10.0.0.1:1234",
            retries=2,
            error="Traceback (most recent call last):\n  ValueError: boom",
            seed=2**62 + 1,
        )
        store.record_trials(exp.id, [trial])
        (got,) = store.get_trials(exp.id)
        assert got.scores["acc"] == [0.1, 0.2]
        assert math.isnan(got.scores["f1"][0])
        assert got.scores["f1"][1] == 0.5
        without_scores = {k: v for k, v in vars(got).items() if k != "scores"}
        assert without_scores == {k: v for k, v in vars(trial).items() if k != "scores"}

    def test_json_roundtrip(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        params = {
            "int": 7,
            "big": 2**53 + 1,
            "neg": -3,
            "float": 0.1 + 0.2,
            "tiny": 5e-324,
            "str": "rbf",
            "true": True,
            "false": False,
            "none": None,
            "list": [1, 2.5, "x", None, True],
            "nested": {"a": [1, {"b": None}]},
            "empty": [],
            "inf": float("inf"),
        }
        store.record_trials(exp.id, [make_trial(exp.id, 0, params=params)])
        got = store.get_trials(exp.id)[0].params
        assert got == params
        assert type(got["int"]) is int and type(got["float"]) is float
        assert got["true"] is True and got["none"] is None

    def test_nul_in_text_is_stored(self, store: RegistryStore) -> None:
        # PostgreSQL's text cannot hold NUL: a failed trial whose message had one lost its
        # whole batch there. Free text stores NUL (and a lone surrogate, which no UTF-8
        # database holds) as U+FFFD on every backend; JSON values keep them exactly.
        odd = "a\x00b\udc80"
        shown = "a\ufffdb\ufffd"
        exp = store.create_experiment(
            "exp", config={"note": odd, "list": [odd]}, cluster={"host": odd}
        )
        batch = [
            make_trial(
                exp.id,
                n,
                state=FAILED,
                value=None,
                params={"s": odd, odd: [odd]},
                scores={odd: [0.5]},
                intermediate={"1": 0.5},
                worker=f"tcp://{odd}:1",
                error=f"ValueError: bad byte \x00 in input {n}",
            )
            for n in range(10)
        ]
        store.record_trials(exp.id, batch)
        got = store.get_trials(exp.id)
        assert [t.number for t in got] == list(range(10))
        assert got[3].error == "ValueError: bad byte \ufffd in input 3"
        assert got[3].worker == f"tcp://{shown}:1"
        assert (got[3].params, got[3].scores) == ({"s": odd, odd: [odd]}, {odd: [0.5]})
        same = [{k: v for k, v in vars(t).items() if k not in ("error", "worker")} for t in got]
        assert same == [
            {k: v for k, v in vars(t).items() if k not in ("error", "worker")} for t in batch
        ]
        assert store.get_experiment(exp.id).config == {"note": odd, "list": [odd]}
        assert store.get_experiment(exp.id).cluster == {"host": odd}
        store.set_experiment_config(exp.id, {"note": odd})
        assert store.get_experiment(exp.id).config == {"note": odd}

        version = _version(
            store, metrics={"note": odd, "acc": 0.5}, lineage={"data": odd}, signature={odd: 1}
        )
        assert store.get_model_version("clf") == version
        assert (version.metrics, version.lineage) == ({"note": odd, "acc": 0.5}, {"data": odd})
        assert version.signature == {odd: 1}
        store.set_tag("clf", 1, "k", odd)
        assert store.get_model_version("clf", 1).tags == {"k": shown}
        # Searching for the value that was set finds it, as does the value read back.
        for value in (odd, shown):
            assert [v.version for v in store.search_model_versions(tag=("k", value))] == [1]
        # Names still refuse NUL: a name must read back as it was given.
        with pytest.raises(InvalidParameterError):
            store.create_experiment("e\x00")
        with pytest.raises(InvalidParameterError):
            store.set_tag("clf", 1, "k\x00", "v")
        with pytest.raises(InvalidParameterError):
            store.set_alias("clf", "a\x00", 1)

    def test_non_json_params(self, store: RegistryStore) -> None:
        np = pytest.importorskip("numpy")
        exp = store.create_experiment("exp")
        params = {
            "n": np.int64(5),
            "x": np.float64(0.25),
            "arr": np.arange(3),
            "tuple": (1, 2),
            "obj": object(),
        }
        store.record_trials(exp.id, [make_trial(exp.id, 0, params=params)])
        got = store.get_trials(exp.id)[0].params
        assert got["n"] == 5 and type(got["n"]) is int
        assert got["x"] == 0.25
        assert got["arr"] == [0, 1, 2]
        assert got["tuple"] == [1, 2]
        assert isinstance(got["obj"], str) and "object" in got["obj"]

    def test_record_trials_is_idempotent(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        store.record_trials(exp.id, [make_trial(exp.id, 0, state=RUNNING, value=None)])
        store.record_trials(exp.id, [make_trial(exp.id, 0, value=0.9, params={"C": 2.0})])
        (got,) = store.get_trials(exp.id)
        assert (got.state, got.value, got.params) == (COMPLETE, 0.9, {"C": 2.0})
        # The same batch twice changes nothing.
        batch = [make_trial(exp.id, n, value=n / 10) for n in range(5)]
        store.record_trials(exp.id, batch)
        store.record_trials(exp.id, batch)
        assert store.count_trials(exp.id) == 5
        assert store.get_trials(exp.id) == batch

    def test_record_trials_last_duplicate_in_batch_wins(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        store.record_trials(
            exp.id, [make_trial(exp.id, 1, value=0.1), make_trial(exp.id, 1, value=0.2)]
        )
        assert [t.value for t in store.get_trials(exp.id)] == [0.2]

    def test_record_trials_validates_before_writing(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        other = store.create_experiment("other")
        batch = [make_trial(exp.id, 0), make_trial(other.id, 1)]
        with pytest.raises(InvalidParameterError):
            store.record_trials(exp.id, batch)
        assert store.count_trials(exp.id) == 0
        assert store.count_trials(other.id) == 0

    def test_record_no_trials(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        store.record_trials(exp.id, [])
        assert store.get_trials(exp.id) == []
        assert store.count_trials(exp.id) == 0

    def test_all_null_columns(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        batch = [
            make_trial(
                exp.id,
                n,
                state=RUNNING,
                value=None,
                started=None,
                finished=None,
                duration=None,
                worker=None,
                seed=None,
                scores={},
                params={},
            )
            for n in range(3)
        ]
        store.record_trials(exp.id, batch)
        assert store.get_trials(exp.id) == batch

    def test_trials_belong_to_their_experiment(self, store: RegistryStore) -> None:
        a = store.create_experiment("a")
        b = store.create_experiment("b")
        store.record_trials(a.id, [make_trial(a.id, n) for n in range(3)])
        store.record_trials(b.id, [make_trial(b.id, n) for n in range(2)])
        assert store.count_trials(a.id) == 3
        assert store.count_trials(b.id) == 2
        assert {t.experiment_id for t in store.get_trials(b.id)} == {b.id}

    def test_state_filter_and_count(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        states = [COMPLETE, FAILED, COMPLETE, TIMEOUT, RUNNING, COMPLETE]
        store.record_trials(exp.id, [make_trial(exp.id, n, state=s) for n, s in enumerate(states)])
        assert [t.number for t in store.get_trials(exp.id, state=COMPLETE)] == [0, 2, 5]
        assert [t.number for t in store.get_trials(exp.id, state=[FAILED, TIMEOUT])] == [1, 3]
        assert store.get_trials(exp.id, state="pruned") == []
        assert store.count_trials(exp.id) == 6
        assert store.count_trials(exp.id, COMPLETE) == 3
        assert store.count_trials(exp.id, [FAILED, TIMEOUT]) == 2
        assert store.count_trials(exp.id, "pruned") == 0
        assert store.count_trials_by_state(exp.id) == {
            COMPLETE: 3,
            FAILED: 1,
            TIMEOUT: 1,
            RUNNING: 1,
        }
        assert store.count_trials_by_state(store.create_experiment("empty").id) == {}
        # The base's default (reading the trials) agrees with the backend's own count.
        assert RegistryStore.count_trials_by_state(store, exp.id) == store.count_trials_by_state(
            exp.id
        )

    def test_paging_in_number_order(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        numbers = [7, 3, 9, 0, 5, 1, 8, 2, 6, 4]
        store.record_trials(exp.id, [make_trial(exp.id, n) for n in numbers[:5]])
        store.record_trials(exp.id, [make_trial(exp.id, n) for n in numbers[5:]])
        assert [t.number for t in store.get_trials(exp.id)] == list(range(10))
        pages = [
            [t.number for t in store.get_trials(exp.id, offset=o, limit=3)] for o in (0, 3, 6, 9)
        ]
        assert pages == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
        assert store.get_trials(exp.id, offset=10, limit=3) == []
        assert [t.number for t in store.get_trials(exp.id, offset=8)] == [8, 9]
        assert store.get_trials(exp.id, limit=0) == []
        odd = store.get_trials(exp.id, state=COMPLETE, offset=2, limit=2)
        assert [t.number for t in odd] == [2, 3]

    def test_bad_paging(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        with pytest.raises(InvalidParameterError):
            store.get_trials(exp.id, offset=-1)
        with pytest.raises(InvalidParameterError):
            store.get_trials(exp.id, limit=-1)

    def test_leaderboard(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        batch = [
            make_trial(exp.id, 0, value=0.5),
            make_trial(exp.id, 1, value=0.9),
            make_trial(exp.id, 2, value=float("nan")),
            make_trial(exp.id, 3, value=None),
            make_trial(exp.id, 4, value=0.99, state=FAILED),
            make_trial(exp.id, 5, value=0.7),
            make_trial(exp.id, 6, value=0.9),
            make_trial(exp.id, 7, value=-1.0),
            make_trial(exp.id, 8, value=float("inf"), state=RUNNING),
        ]
        store.record_trials(exp.id, batch)
        board = store.leaderboard(exp.id)
        # Ties go to the lower number; NaN/None values and unfinished trials are left out.
        assert [t.number for t in board] == [1, 6, 5, 0, 7]
        assert [t.number for t in store.leaderboard(exp.id, k=2)] == [1, 6]
        assert store.leaderboard(exp.id, k=0) == []
        with pytest.raises(InvalidParameterError):
            store.leaderboard(exp.id, k=-1)

    def test_experiment_summaries_match_leaderboard_and_count(self, store: RegistryStore) -> None:
        a = store.create_experiment("a")
        b = store.create_experiment("b")
        empty = store.create_experiment("empty")
        store.record_trials(
            a.id,
            [
                make_trial(a.id, 0, value=0.5),
                make_trial(a.id, 1, value=0.99, state=FAILED),
                make_trial(a.id, 2, value=float("nan")),
                make_trial(a.id, 3, value=0.7),
            ],
        )
        store.record_trials(b.id, [make_trial(b.id, 0, value=None, state=FAILED)])
        summaries = store.experiment_summaries()
        assert summaries == {a.id: (4, 0.7), b.id: (1, None), empty.id: (0, None)}
        for exp_id, (count, best) in summaries.items():
            top = store.leaderboard(exp_id, k=1)
            assert count == store.count_trials(exp_id)
            assert best == (top[0].value if top else None)

    def test_nan_value_is_stored_as_none(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        store.record_trials(exp.id, [make_trial(exp.id, 0, value=float("nan"))])
        assert store.get_trials(exp.id)[0].value is None

    def test_infinite_values_are_kept(self, store: RegistryStore) -> None:
        from .._evaluate import TrialOutcome

        inf = math.inf
        exp = store.create_experiment("exp")

        def outcome(number: int, folds: list[float]) -> TrialRecord:
            done = TrialOutcome(
                number=number,
                params={"C": 1.0},
                seed=0,
                state=COMPLETE,
                test_scores=[{"score": s} for s in folds],
                train_scores=None,
                fit_times=[0.1] * len(folds),
                score_times=[0.1] * len(folds),
                started=100.0,
                finished=101.0,
                worker="tcp://w:1",
            )
            return TrialRecord.from_outcome(exp.id, done, metric="score")

        records = [
            outcome(0, [inf, 0.5]),  # the mean a search reports as best_score_: inf
            outcome(1, [-inf, 0.5]),
            outcome(2, [inf, -inf]),  # NaN, as numpy's mean
            outcome(3, [float("nan"), 0.5]),
            make_trial(exp.id, 4, value=inf),
        ]
        store.record_trials(exp.id, records)
        got = {t.number: t for t in store.get_trials(exp.id)}
        assert [got[n].value for n in range(5)] == [inf, -inf, None, None, inf]
        assert got[0].scores == {"score": [inf, 0.5]}
        assert list(store.trials_dataframe(exp.id)["value"])[:2] == [inf, -inf]
        _version(store, metrics={"score": inf, "loss": -inf})
        assert store.get_model_version("clf").metrics == {"score": inf, "loss": -inf}

    def test_trials_dataframe(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        store.record_trials(
            exp.id,
            [
                make_trial(exp.id, 0, params={"C": 1.0, "kernel": "rbf"}, value=0.6),
                make_trial(exp.id, 1, params={"C": 2.0}, state=FAILED, value=None),
            ],
        )
        frame = store.trials_dataframe(exp.id)
        assert list(frame["number"]) == [0, 1]
        assert list(frame["param_C"]) == [1.0, 2.0]
        assert frame["param_kernel"].iloc[0] == "rbf"
        assert frame["param_kernel"].isna().iloc[1]
        assert frame["mean_test_score"].iloc[0] == pytest.approx(0.6)
        assert list(store.trials_dataframe(exp.id, state=FAILED)["number"]) == [1]
        empty = store.trials_dataframe(exp.id, state="pruned")
        assert len(empty) == 0 and "number" in empty.columns

    def test_trial_record_from_outcome(self, store: RegistryStore) -> None:
        from .._evaluate import COMPLETE as EVAL_COMPLETE
        from .._evaluate import FAILED as EVAL_FAILED
        from .._evaluate import TIMEOUT as EVAL_TIMEOUT
        from .._evaluate import TrialOutcome

        assert (EVAL_COMPLETE, EVAL_FAILED, EVAL_TIMEOUT) == (COMPLETE, FAILED, TIMEOUT)
        outcome = TrialOutcome(
            number=4,
            params={"C": 0.1},
            seed=11,
            state=COMPLETE,
            test_scores=[{"acc": 0.5, "f1": 0.1}, {"acc": 0.7, "f1": 0.3}],
            train_scores=None,
            fit_times=[0.1, 0.1],
            score_times=[0.01, 0.01],
            started=100.0,
            finished=102.5,
            worker="tcp://w:1",
        )
        exp = store.create_experiment("exp")
        record = TrialRecord.from_outcome(exp.id, outcome, metric="acc")
        store.record_trials(exp.id, [record])
        (got,) = store.get_trials(exp.id)
        assert got.scores == {"acc": [0.5, 0.7], "f1": [0.1, 0.3]}
        assert got.value == pytest.approx(0.6)
        assert (got.duration, got.seed, got.worker) == (2.5, 11, "tcp://w:1")
        with pytest.raises(InvalidParameterError, match="metric"):
            TrialRecord.from_outcome(exp.id, outcome)

    # -- model versions --------------------------------------------------------------------

    def test_versions_count_up(self, store: RegistryStore) -> None:
        versions = [_version(store).version for _ in range(5)]
        assert versions == [1, 2, 3, 4, 5]
        assert _version(store, "other").version == 1
        assert [v.version for v in store.list_model_versions("clf")] == [1, 2, 3, 4, 5]

    def test_version_roundtrip(self, store: RegistryStore) -> None:
        before = time.time()
        created = store.create_model_version(
            "clf",
            artifact_uri="file:///tmp/a/b",
            sha256="f" * 64,
            format="xgboost-ubj",
            metrics={"accuracy": 0.91, "n_features": 20, "note": "holdout"},
            signature={"inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 20]}]},
            lineage={"experiment_id": 3, "trial": 17, "data_fingerprint": "abc"},
            trusted_types=["sklearn.linear_model.LogisticRegression"],
        )
        assert created.version == 1
        assert before - 1 <= created.created <= time.time() + 1
        assert (created.tags, created.aliases) == ({}, [])
        assert store.get_model_version("clf", 1) == created
        assert created.metrics["note"] == "holdout"
        assert created.trusted_types == ["sklearn.linear_model.LogisticRegression"]

    def test_latest_version(self, store: RegistryStore) -> None:
        for _ in range(3):
            _version(store)
        assert store.get_model_version("clf").version == 3

    def test_missing_versions(self, store: RegistryStore) -> None:
        with pytest.raises(NotFoundError, match="nope"):
            store.get_model_version("nope")
        with pytest.raises(NotFoundError):
            store.list_model_versions("nope")
        _version(store)
        with pytest.raises(NotFoundError):
            store.get_model_version("clf", 2)
        with pytest.raises(NotFoundError):
            store.get_model_version("clf", alias="champion")
        with pytest.raises(InvalidParameterError):
            store.get_model_version("clf", 1, alias="champion")
        store.delete_model_version("clf", 1)
        with pytest.raises(NotFoundError):
            store.get_model_version("clf")
        assert store.list_model_versions("clf") == []

    def test_invalid_names(self, store: RegistryStore) -> None:
        for bad in ("", "x" * (MAX_NAME + 1)):
            with pytest.raises(InvalidParameterError):
                store.create_experiment(bad)
            with pytest.raises(InvalidParameterError):
                _version(store, bad)
        longest = "x" * MAX_NAME
        assert store.create_experiment(longest).name == longest
        assert _version(store, longest).model == longest
        store.set_alias(longest, longest, 1)
        store.set_tag(longest, 1, longest, "v")
        got = store.get_model_version(longest, alias=longest)
        assert (got.aliases, got.tags) == ([longest], {longest: "v"})
        with pytest.raises(InvalidParameterError):
            store.set_alias(longest, longest + "x", 1)
        for sha in ("A" * 64, "a" * 63, "g" * 64):
            with pytest.raises(InvalidParameterError, match="sha256"):
                _version(store, sha256=sha)
        _version(store)
        with pytest.raises(InvalidParameterError):
            store.set_alias("clf", "", 1)
        with pytest.raises(InvalidParameterError):
            store.set_tag("clf", 1, "", "v")
        assert store.list_models() == ["clf", longest]

    def test_names_that_would_not_read_back_are_refused(self, store: RegistryStore) -> None:
        # 'm@a' loads alias 'a' of model 'm'; '1', 'v1' and 'latest' read as versions; a
        # name with a line break or surrounding spaces does not print as it was typed.
        for bad in ("clf@prod", " clf", "clf\n", "c\tlf", "c\u2028lf"):
            with pytest.raises(InvalidParameterError) as info:
                _version(store, bad)
            assert info.value.param == "model"
        for bad in ("exp\n", "exp ", "e\x1bxp"):
            with pytest.raises(InvalidParameterError) as info:
                store.create_experiment(bad)
            assert info.value.param == "name"
        _version(store)
        for bad in ("latest", "Latest", "1", "007", "v1", "V2", "version3", " prod", "pr\nod"):
            with pytest.raises(InvalidParameterError) as info:
                store.set_alias("clf", bad, 1)
            assert info.value.param == "alias"
        for good in ("prod", "v1-candidate", "1st", "名前"):
            store.set_alias("clf", good, 1)
        assert store.list_models() == ["clf"]
        assert store.list_experiments() == []

    def test_list_models(self, store: RegistryStore) -> None:
        assert store.list_models() == []
        for name in ("b", "a", "b"):
            _version(store, name)
        assert store.list_models() == ["a", "b"]

    def test_aliases(self, store: RegistryStore) -> None:
        for _ in range(3):
            _version(store)
        store.set_alias("clf", "champion", 1)
        store.set_alias("clf", "challenger", 3)
        assert store.get_model_version("clf", alias="champion").version == 1
        assert store.get_model_version("clf", 1).aliases == ["champion"]
        # Moving an alias takes it off the old version.
        store.set_alias("clf", "champion", 3)
        assert store.get_model_version("clf", alias="champion").version == 3
        assert store.get_model_version("clf", 1).aliases == []
        assert store.get_model_version("clf", 3).aliases == ["challenger", "champion"]
        store.delete_alias("clf", "champion")
        with pytest.raises(NotFoundError):
            store.get_model_version("clf", alias="champion")
        with pytest.raises(NotFoundError):
            store.delete_alias("clf", "champion")
        with pytest.raises(NotFoundError):
            store.set_alias("clf", "x", 99)
        with pytest.raises(NotFoundError):
            store.set_alias("nope", "x", 1)

    def test_aliases_are_per_model(self, store: RegistryStore) -> None:
        _version(store, "a")
        _version(store, "b")
        _version(store, "b")
        store.set_alias("a", "prod", 1)
        store.set_alias("b", "prod", 2)
        assert store.get_model_version("a", alias="prod").model == "a"
        assert store.get_model_version("b", alias="prod").version == 2

    def test_tags(self, store: RegistryStore) -> None:
        _version(store)
        store.set_tag("clf", 1, "team", "search")
        store.set_tag("clf", 1, "stage", "dev")
        store.set_tag("clf", 1, "stage", "review")
        assert store.get_model_version("clf", 1).tags == {"stage": "review", "team": "search"}
        store.delete_tag("clf", 1, "team")
        assert store.get_model_version("clf", 1).tags == {"stage": "review"}
        with pytest.raises(NotFoundError):
            store.delete_tag("clf", 1, "team")
        with pytest.raises(NotFoundError):
            store.set_tag("clf", 2, "k", "v")

    def test_search_model_versions(self, store: RegistryStore) -> None:
        for acc in (0.7, 0.9, 0.8):
            _version(store, "a", metrics={"accuracy": acc, "label": "x"})
        _version(store, "b", metrics={"accuracy": 0.85, "rmse": 1.0})
        _version(store, "b", metrics={})
        store.set_tag("a", 2, "team", "red")
        store.set_tag("b", 1, "team", "red")
        store.set_tag("a", 3, "team", "blue")

        def keys(versions: list[ModelVersionRecord]) -> list[tuple[str, int]]:
            return [(v.model, v.version) for v in versions]

        everything = keys(store.search_model_versions())
        assert everything == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)]
        assert keys(store.search_model_versions(model="b")) == [("b", 1), ("b", 2)]
        assert keys(store.search_model_versions(tag=("team", "red"))) == [("a", 2), ("b", 1)]
        assert keys(store.search_model_versions(model="a", tag=("team", "red"))) == [("a", 2)]
        by_metric = keys(store.search_model_versions(metric="accuracy"))
        assert by_metric == [("a", 2), ("b", 1), ("a", 3), ("a", 1)]
        above = store.search_model_versions(metric="accuracy", min_value=0.8)
        assert keys(above) == [("a", 2), ("b", 1), ("a", 3)]
        assert keys(store.search_model_versions(metric="rmse")) == [("b", 1)]
        assert store.search_model_versions(metric="label") == []
        assert store.search_model_versions(model="nope") == []
        assert store.search_model_versions(tag=("team", "green")) == []
        page = store.search_model_versions(metric="accuracy", offset=1, limit=2)
        assert keys(page) == [("b", 1), ("a", 3)]
        assert store.search_model_versions(limit=0) == []
        tagged = store.search_model_versions(tag=("team", "blue"))
        assert tagged[0].tags == {"team": "blue"}

    def test_delete_version(self, store: RegistryStore) -> None:
        for _ in range(3):
            _version(store)
        store.set_alias("clf", "champion", 3)
        store.set_alias("clf", "backup", 2)
        store.set_tag("clf", 3, "k", "v")
        store.delete_model_version("clf", 3)
        assert [v.version for v in store.list_model_versions("clf")] == [1, 2]
        assert store.get_model_version("clf").version == 2
        with pytest.raises(NotFoundError):
            store.get_model_version("clf", alias="champion")
        assert store.get_model_version("clf", alias="backup").version == 2
        assert store.search_model_versions(tag=("k", "v")) == []
        with pytest.raises(NotFoundError):
            store.delete_model_version("clf", 3)
        # A deleted number is never handed out again.
        assert _version(store).version == 4

    def test_referenced_artifacts(self, store: RegistryStore) -> None:
        assert store.referenced_artifacts() == set()
        a = _version(store, sha256="a" * 64)
        _version(store, "other", sha256="a" * 64)
        b = _version(store, sha256="b" * 64)
        assert store.referenced_artifacts() == {"a" * 64, "b" * 64}
        store.delete_model_version("clf", b.version)
        assert store.referenced_artifacts() == {"a" * 64}
        store.delete_model_version("clf", a.version)
        assert store.referenced_artifacts() == {"a" * 64}  # still used by "other"
        store.delete_model_version("other", 1)
        assert store.referenced_artifacts() == set()

    def test_an_experiments_recorded_checkpoint_is_referenced(self, store: RegistryStore) -> None:
        # An unfinished training job's last checkpoint must survive garbage collection.
        exp = store.create_experiment("job", config={"kind": "train", "checkpoint_every": 1})
        assert store.referenced_artifacts() == set()
        store.set_experiment_config(exp.id, {"kind": "train", "checkpoint": {"sha256": "c" * 64}})
        assert store.referenced_artifacts() == {"c" * 64}
        store.set_experiment_config(exp.id, {"kind": "train"})  # the job finished
        assert store.referenced_artifacts() == set()
        store.set_experiment_config(exp.id, {"kind": "train", "checkpoint": {"sha256": "d" * 64}})
        store.delete_experiment(exp.id)
        assert store.referenced_artifacts() == set()

    def test_records_are_snapshots(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp", config={"a": 1})
        exp.config["a"] = 2
        assert store.get_experiment("exp").config == {"a": 1}
        version = _version(store, metrics={"m": 1.0})
        version.metrics["m"] = 2.0
        assert store.get_model_version("clf").metrics == {"m": 1.0}

    def test_model_summaries(self, store: RegistryStore) -> None:
        assert store.model_summaries() == []
        before = time.time()
        for _ in range(3):
            _version(store, "b")
        _version(store, "a")
        store.set_alias("b", "champion", 2)
        store.set_alias("b", "newest", 3)
        store.delete_model_version("a", 1)
        summaries = store.model_summaries()
        assert [s.name for s in summaries] == ["a", "b"]
        a, b = summaries
        # A model whose versions were all deleted is still listed, with none.
        assert (a.latest_version, a.n_versions, a.aliases, a.updated) == (None, 0, {}, None)
        assert (b.latest_version, b.n_versions) == (3, 3)
        assert b.aliases == {"champion": 2, "newest": 3}
        assert before - 1 <= b.created <= time.time() + 1
        assert b.updated == store.get_model_version("b").created
        # The snapshot is the caller's.
        b.aliases["x"] = 1
        assert store.model_summaries()[1].aliases == {"champion": 2, "newest": 3}

    # -- deleting experiments ----------------------------------------------------------------

    def test_delete_experiment(self, store: RegistryStore) -> None:
        gone = store.create_experiment("gone")
        kept = store.create_experiment("kept")
        store.record_trials(gone.id, [make_trial(gone.id, n) for n in range(5)])
        store.record_trials(kept.id, [make_trial(kept.id, n) for n in range(3)])
        version = _version(store, lineage={"experiment_id": gone.id, "experiment": "gone"})
        assert store.delete_experiment("gone") == 5
        with pytest.raises(NotFoundError, match="gone"):
            store.get_experiment("gone")
        with pytest.raises(NotFoundError):
            store.get_experiment(gone.id)
        with pytest.raises(NotFoundError):
            store.get_trials(gone.id)
        # Another experiment's trials and the versions registered from it stay.
        assert store.count_trials(kept.id) == 3
        assert store.get_model_version("clf") == version
        assert [e.name for e in store.list_experiments()] == ["kept"]
        assert store.experiment_summaries() == {kept.id: (3, 0.6)}
        with pytest.raises(NotFoundError):
            store.delete_experiment("gone")
        # The name can be used again, under a new id (the old one is never reused).
        again = store.create_experiment("gone")
        assert again.id not in (gone.id, kept.id)
        assert store.count_trials(again.id) == 0
        assert store.delete_experiment(again.id) == 0
        with pytest.raises(NotFoundError):
            store.delete_experiment(10_000)

    # -- metadata and argument types -------------------------------------------------------

    def test_meta(self, store: RegistryStore) -> None:
        assert store.get_meta("contract") is None
        assert store.setdefault_meta("contract", "first") == "first"
        assert store.setdefault_meta("contract", "second") == "first"
        assert store.get_meta("contract") == "first"
        with pytest.raises(InvalidParameterError):
            store.setdefault_meta("", "x")

    def test_meta_setdefault_is_atomic(self, store: RegistryStore) -> None:
        n = 4
        barrier = threading.Barrier(n)

        def claim(index: int) -> str:
            barrier.wait(timeout=30)
            return store.setdefault_meta("owner", f"thread-{index}")

        with ThreadPoolExecutor(n) as pool:
            results = list(pool.map(claim, range(n)))
        assert len(set(results)) == 1
        assert store.get_meta("owner") == results[0]

    def test_wrong_argument_types(self, store: RegistryStore) -> None:
        record = _version(store)
        with pytest.raises(InvalidParameterError, match="model") as info:
            store.get_model_version(record)  # type: ignore[arg-type]
        assert "record.model" in str(info.value)
        with pytest.raises(InvalidParameterError, match="version"):
            store.get_model_version("clf", version="1")  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="model"):
            store.list_model_versions(["clf"])  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="model"):
            store.delete_model_version(record, 1)  # type: ignore[arg-type]
        exp = store.create_experiment("exp")
        with pytest.raises(InvalidParameterError, match="name_or_id"):
            store.get_experiment(exp)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="name_or_id"):
            store.delete_experiment(1.0)  # type: ignore[arg-type]
        assert store.get_experiment("exp") == exp

    # -- threads ---------------------------------------------------------------------------

    def test_one_store_many_threads(self, store: RegistryStore) -> None:
        exp = store.create_experiment("exp")
        n_threads, per_thread = 4, 5
        barrier = threading.Barrier(n_threads)

        def work(index: int) -> list[int]:
            barrier.wait(timeout=30)
            versions = []
            for j in range(per_thread):
                number = index * per_thread + j
                store.record_trials(exp.id, [make_trial(exp.id, number)])
                versions.append(_version(store, "shared").version)
                store.get_trials(exp.id, limit=5)
            return versions

        with ThreadPoolExecutor(n_threads) as pool:
            results = list(pool.map(work, range(n_threads)))
        versions = sorted(v for r in results for v in r)
        assert versions == list(range(1, n_threads * per_thread + 1))
        assert store.count_trials(exp.id) == n_threads * per_thread
