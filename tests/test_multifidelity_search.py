"""SearchCV(scheduler=...): rung steps on a real process cluster, state kept on workers."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client, get_task_stream
from sklearn.base import clone
from sklearn.datasets import load_digits, make_classification
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.linear_model import SGDClassifier
from sklearn.svm import SVC

from dmlsearch import Float, SearchCV
from dmlsearch._rungs import held_states
from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.registry import Registry
from dmlsearch.runner.loop import WorkLoop
from dmlsearch.runner.units import Unit
from dmlsearch.schedulers import ASHA, Hyperband, SuccessiveHalving
from dmlsearch.testing import PowerKind, WaveSource, local_cluster

pytestmark = pytest.mark.cluster

SGD_SPACE = {"alpha": Float(1e-5, 1e-1, log=True)}


#: SearchCV's bounds left unset, as beside a Scheduler instance.
UNSET = {"min_resource": None, "max_resource": None}


@pytest.fixture(scope="module")
def steady() -> Iterator[Client]:
    """Two one-thread workers without work stealing, so a promotion runs where its state
    is and the work counts are exact (with stealing, Dask may move a promotion to an idle
    worker, which then refits: correct, but not what these tests count)."""
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        cluster = local_cluster(2)
    with Client(cluster, set_as_default=False) as client:
        yield client
    cluster.close()


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_digits(return_X_y=True)
    return X[:450] / 16.0, y[:450]


def _search(client: Client, estimator: Any = None, **kwargs: Any) -> SearchCV:
    params: dict[str, Any] = {
        "scheduler": "asha",
        "resource": "partial_fit",
        "min_resource": 1,
        "max_resource": 9,
        "cv": 3,
        "random_state": 0,
        "client": client,
        "progress": False,
        "dashboard": False,
    }
    params.update(kwargs)
    space = params.pop("space", SGD_SPACE)
    if estimator is None:
        estimator = SGDClassifier(random_state=0)
    return SearchCV(estimator, space, **params)


def _highest(search: SearchCV) -> dict[int, int]:
    r = search.cv_results_
    out: dict[int, int] = {}
    for trial, resource in zip(r["trial"], r["n_resources"], strict=True):
        out[int(trial)] = max(out.get(int(trial), 0), int(resource))
    return out


def _check_rows(search: SearchCV) -> None:
    r = search.cv_results_
    pairs = list(zip(r["trial"].tolist(), r["n_resources"].tolist(), strict=True))
    assert len(pairs) == len(set(pairs)), "a (trial, rung) row twice"
    assert len(search.trials_) == len(pairs)
    # best_index_ is rank 1: the best score at the highest resource reached.
    top = r["n_resources"] == r["n_resources"].max()
    assert r["rank_test_score"][search.best_index_] == 1
    assert search.best_score_ == np.nanmax(r["mean_test_score"][top])
    assert search.best_resource_ == r["n_resources"].max()
    for trial, curve in search.history_.items():
        assert [res for res, _ in curve] == sorted(r["n_resources"][r["trial"] == trial])


def test_asha_partial_fit_continues_every_promotion(steady, digits):
    X, y = digits
    search = _search(steady, n_trials=12).fit(X, y)
    r = search.cv_results_
    _check_rows(search)
    assert search.n_resources_[0] == 1 and search.n_candidates_[0] == 12
    assert set(r["iter"]) == set(range(len(search.n_resources_)))
    # Counted on the workers: a promotion trained only the resource it added.
    assert float(np.sum(r["work"])) == sum(_highest(search).values())
    promoted = r["n_resources"] > 1
    assert promoted.any() and r["continued"][promoted].all()
    assert not r["continued"][~promoted].any()
    assert search.best_estimator_.t_ > 0 and search.score(X, y) > 0.5
    # Every state of the run was dropped at the end.
    assert all(not held for held in steady.run(held_states).values())


def test_n_estimators_warm_start_continues(steady):
    X, y = make_classification(n_samples=150, n_features=6, random_state=0)
    search = _search(
        steady,
        GradientBoostingClassifier(max_depth=2, random_state=0),
        space={"learning_rate": Float(0.01, 0.5, log=True)},
        resource="n_estimators",
        min_resource=2,
        max_resource=18,
        n_trials=9,
    ).fit(X, y)
    _check_rows(search)
    r = search.cv_results_
    assert float(np.sum(r["work"])) == sum(_highest(search).values())
    assert r["continued"][r["n_resources"] > 2].all()
    assert len(search.best_estimator_.estimators_) == search.best_resource_
    # As scikit-learn's Halving searches: the resource is one of each row's params, so
    # best_params_ rebuilds the best estimator.
    assert list(r["param_n_estimators"]) == list(r["n_resources"])
    assert search.best_params_["n_estimators"] == search.best_resource_
    rebuilt = clone(search.estimator).set_params(**search.best_params_).fit(X, y)
    assert np.array_equal(rebuilt.predict_proba(X), search.best_estimator_.predict_proba(X))


def test_estimator_without_partial_fit_or_warm_start_by_rows(client):
    X, y = make_classification(n_samples=120, n_features=5, random_state=1)
    search = _search(
        client,
        SVC(),
        space={"C": Float(0.1, 10.0, log=True)},
        scheduler="halving",
        resource="n_samples",
        min_resource=None,
        max_resource=None,
    ).fit(X, y)
    _check_rows(search)
    r = search.cv_results_
    assert search.max_resources_ == 80  # the rows of a training fold
    assert not r["continued"].any()
    assert np.array_equal(r["work"], r["n_resources"].astype(float))  # each step refits
    assert search.best_estimator_.support_vectors_.shape[0] > 0  # refitted on all rows


def test_hyperband_runs_li_et_al_brackets(steady, digits):
    X, y = digits
    search = _search(
        steady, scheduler="hyperband", max_resource=27, space={"alpha": Float(1e-4, 1e-1, log=True)}
    ).fit(X, y)
    r = search.cv_results_
    _check_rows(search)
    # R=27, eta=3: s=3: 27@1 9@3 3@9 1@27; s=2: 12@3 4@9 1@27; s=1: 6@9 2@27; s=0: 4@27.
    want = {
        3: {1: 27, 3: 9, 9: 3, 27: 1},
        2: {3: 12, 9: 4, 27: 1},
        1: {9: 6, 27: 2},
        0: {27: 4},
    }
    got: dict[int, Counter[int]] = {}
    for bracket, resource in zip(r["bracket"], r["n_resources"], strict=True):
        got.setdefault(int(bracket), Counter())[int(resource)] += 1
    assert {b: dict(c) for b, c in got.items()} == want
    assert search.n_resources_ == [1, 3, 9, 27] and search.n_candidates_ == [27, 21, 13, 8]
    # scikit-learn's: 4 rungs from 1 to 27; 49 trials started, 1 + floor(log3(49)) = 4.
    assert search.n_possible_iterations_ == 4 and search.n_required_iterations_ == 4
    assert float(np.sum(r["work"])) == sum(_highest(search).values())


@pytest.mark.parametrize(
    "scheduler, n",
    [
        (Hyperband(1, 9, 3, rounds=2), 2 * (9 + 5 + 3)),
        (SuccessiveHalving(1, 9, 3, 12), 12),
        (ASHA(1, 9, 3, max_trials=14), 14),
    ],
)
def test_a_fixed_schedule_instance_runs_its_own_trial_count(steady, digits, scheduler, n):
    # Without n_trials, a Hyperband or SuccessiveHalving instance runs every trial of its
    # schedule (the general default of 10 left its brackets short).
    X, y = digits
    search = _search(steady, scheduler=scheduler, **UNSET).fit(X, y)
    assert len(search.history_) == n
    assert search.n_possible_iterations_ == 3
    assert search.n_required_iterations_ == (4 if n == 34 else 3)  # 34 >= 27; 12, 14 < 27


def test_an_asha_budget_without_n_trials_is_spent(steady, digits):
    # ASHA(max_total_resource=...) alone ran the strategy's default 10 trials and left
    # most of its budget unspent.
    X, y = digits
    search = _search(steady, scheduler=ASHA(1, 9, 3, max_total_resource=60), **UNSET).fit(X, y)
    assert len(search.history_) > 10
    assert 60 - 9 < search.total_work_ <= 60  # no step that would pass it was issued
    assert int(np.max(search.cv_results_["n_resources"])) == 9


def test_halving_and_asha_give_the_same_results_twice(steady, digits):
    X, y = digits

    def rows(search: SearchCV) -> list[tuple[Any, ...]]:
        r = search.cv_results_
        return list(
            zip(
                r["trial"].tolist(),
                r["n_resources"].tolist(),
                r["param_alpha"].tolist(),
                r["mean_test_score"].tolist(),
                strict=True,
            )
        )

    halving = [rows(_search(steady, scheduler="halving").fit(X, y)) for _ in range(2)]
    assert halving[0] == halving[1]
    assert Counter(res for _, res, _, _ in halving[0]) == {1: 9, 3: 3, 9: 1}
    # ASHA decides on results as they arrive: one step at a time makes that order fixed.
    asha = [rows(_search(steady, n_trials=8, max_concurrent_trials=1).fit(X, y)) for _ in range(2)]
    assert asha[0] == asha[1]


def test_median_stopping_runs_steps_and_stops_poor_trials(steady, digits):
    X, y = digits
    space = {"alpha": Float(1e-5, 10.0, log=True)}  # large alphas learn badly: stopped
    search = _search(steady, scheduler="median", space=space, n_trials=12).fit(X, y)
    r = search.cv_results_
    _check_rows(search)
    ladder = [1, 3, 9]
    for curve in search.history_.values():
        assert [res for res, _ in curve] == ladder[: len(curve)]
    assert len(search.history_) == 12
    assert any(len(c) < 3 for c in search.history_.values()), "no trial was stopped"
    assert any(len(c) == 3 for c in search.history_.values())
    assert float(np.sum(r["work"])) == sum(_highest(search).values())


@pytest.mark.parametrize(
    ("scheduler", "alphas", "candidates"),
    [
        ("halving", [1e-4, 1e-3, 1e-2, 1e-1], [4, 3, 1]),
        ("halving", [1e-4, 1e-1], [2, 2, 1]),
        ("halving", [1e-3], [1, 1, 1]),
        ("hyperband", [1e-4, 1e-1], None),
        ("hyperband", [1e-3], None),
        # Larger than the schedule: every point starts, as in HalvingGridSearchCV (halving
        # schedules 9, Hyperband's brackets 17 a round: a second round takes the rest).
        ("halving", list(np.logspace(-5, 0, 12)), [12, 4, 1]),
        ("hyperband", list(np.logspace(-5, 0, 20)), None),
    ],
)
def test_a_grid_smaller_than_the_schedule_takes_its_best_to_the_top(
    steady, digits, scheduler, alphas, candidates
):
    X, y = digits
    space = {"alpha": alphas}
    search = _search(steady, space=space, strategy="grid", scheduler=scheduler).fit(X, y)
    _check_rows(search)
    # Halving schedules 9 trials at 1 epoch (rungs of 9, 3, 1); a smaller grid fills what
    # it can, and the quotas stay the schedule's: the trials the grid could not start
    # never shrink the rungs above, so the best trial reaches the top. Hyperband's first
    # bracket is such a halving run, and the grid fills it alone.
    if candidates is not None:
        assert search.n_candidates_ == candidates and search.n_resources_ == [1, 3, 9]
    started = {float(p["alpha"]) for p in search.cv_results_["params"]}
    assert started == {float(a) for a in alphas}  # no point of the grid left out
    assert search.best_resource_ == 9
    assert max(search.cv_results_["n_resources"]) == 9
    assert float(np.sum(search.cv_results_["work"])) == sum(_highest(search).values())


@pytest.mark.parametrize("strategy", ["random", "tpe"])
def test_any_strategy_with_asha(steady, digits, strategy):
    X, y = digits
    search = _search(steady, strategy=strategy, n_trials=10).fit(X, y)
    _check_rows(search)
    assert sorted(search.history_) == list(range(10))
    assert all(t.state == "complete" for t in search.trials_)


@pytest.mark.parametrize(
    ("kwargs", "param", "match"),
    [
        ({"scheduler": "ahsa"}, "scheduler", "did you mean 'asha'"),
        # the name first: without a resource, "resource" was blamed for a misspelt name
        ({"scheduler": "ashaa", "resource": None}, "scheduler", "did you mean 'asha'"),
        ({"min_resource": 10, "max_resource": 9}, "min_resource", "<= max_resource"),
        ({"reduction_factor": 1}, "reduction_factor", ">= 2"),
        ({"resource": "n_estimatorz"}, "resource", "has no parameter"),
        ({"resource": None}, "resource", "needs resource"),
        ({"max_resource": None}, "max_resource", "needs max_resource"),
        ({"scheduler": None}, "resource", "only apply to a multi-fidelity search"),
        (
            {
                "scheduler": None,
                "resource": None,
                "max_resource": None,
                "min_resource": None,
                "reduction_factor": 4,
            },
            "reduction_factor",
            "only apply",
        ),
        ({"resource": "n_samples", "max_resource": 1000}, "max_resource", "at most the 40 rows"),
        ({"scheduler": ASHA(1, 9), "min_resource": 1}, "scheduler", "carries its own"),
        # Probes: the first was ignored, the next ones failed on the workers or with a
        # bare ValueError / TypeError.
        (
            {"scheduler": ASHA(1, 9), "reduction_factor": 2, **UNSET},
            "reduction_factor",
            "carries its own reduction factor",
        ),
        (
            {"scheduler": ASHA(10, 90, 3), "resource": "n_samples", **UNSET},
            "scheduler",
            "at most the 40 rows of the smallest training fold, got a top rung of 90 rows",
        ),
        ({"resource": "n_samples", "max_resource": "auto"}, "max_resource", "'auto' is None"),
        ({"max_resource": [9]}, "max_resource", "must be an integer"),
        ({"min_resource": "1"}, "min_resource", "must be an integer"),
        ({"keep_oof": True}, "keep_oof", "not kept with a scheduler"),
    ],
)
def test_bad_input_raises_before_any_work(kwargs, param, match):
    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    # No cluster at this address: any attempt to reach it would fail differently.
    search = _search("tcp://127.0.0.1:1", **kwargs)
    with pytest.raises(InvalidParameterError, match=match) as info:
        search.fit(X, y)
    assert info.value.param == param


def test_partial_fit_resource_needs_partial_fit():
    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    search = _search("tcp://127.0.0.1:1", SVC(), space={"C": [1.0, 2.0]})
    with pytest.raises(InvalidParameterError, match="has none"):
        search.fit(X, y)


def test_a_worker_killed_mid_search_loses_its_states_and_the_search_completes(
    fresh_cluster, tmp_path
):
    X, y = make_classification(n_samples=3000, n_features=40, random_state=0)
    registry = Registry(f"sqlite:///{tmp_path / 'r.db'}")
    with Client(fresh_cluster, set_as_default=False) as client:
        pids = client.run(os.getpid)
        victim = next(iter(pids))
        killed: list[list[int]] = []

        def killer() -> None:
            # Kill the victim once it holds trained states and is running a step.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    held = client.run(held_states, workers=[victim]).get(victim, [])
                    busy = client.processing([victim]).get(victim, [])
                except Exception:  # the cluster is busy: look again
                    held, busy = [], []
                if held and busy:
                    killed.append(held)
                    os.kill(pids[victim], signal.SIGKILL)
                    return
                time.sleep(0.02)

        thread = threading.Thread(target=killer)
        thread.start()
        search = _search(
            client, n_trials=20, max_resource=27, registry=registry, experiment_name="killed"
        ).fit(X, y)
        thread.join()
    assert killed, "the victim never held a state while busy"
    _check_rows(search)
    r = search.cv_results_
    assert {t.state for t in search.trials_} == {"complete"}
    assert sorted(search.history_) == list(range(20))
    # A refit (state lost) trains the whole resource again: never less than the curve.
    assert float(np.sum(r["work"])) >= sum(_highest(search).values())
    assert np.array_equal(r["work"][~r["continued"]], r["n_resources"][~r["continued"]])
    records = registry.store.get_trials(search.experiment_id_)
    assert sorted(t.number for t in records) == list(range(20))  # each trial once
    for record in records:
        curve = search.history_[record.number]
        # The learning curve; the "<resource>:<field>" keys are each step's numbers.
        points = {k: v for k, v in record.intermediate.items() if ":" not in k}
        assert points == {str(res): score for res, score in curve}
    registry.close()


class _PinnedKind(PowerKind):
    """Every task prefers one worker."""

    def __init__(self, worker: str) -> None:
        super().__init__(exponent=2)
        self.worker = worker

    def placement(self, units: list[Unit[tuple[int, float]]]) -> list[str] | None:
        return [self.worker]


def test_the_loop_places_a_task_where_its_kind_prefers(steady):
    worker = sorted(steady.nthreads())[1]
    source = WaveSource(n=12, wave=12, seconds=0.01)
    with get_task_stream(steady) as stream:
        WorkLoop(steady, _PinnedKind(worker), source, name="pinned").run()
    assert source.results == {x: x * x for x in range(12)}
    ran = {t["worker"] for t in stream.data if str(t["key"]).startswith("dmlsearch-power")}
    assert ran == {worker}


def test_a_preferred_worker_that_is_gone_does_not_block_the_task(steady):
    source = WaveSource(n=4, wave=4)
    WorkLoop(steady, _PinnedKind("tcp://127.0.0.1:9"), source, name="gone").run()
    assert source.results == {x: x * x for x in range(4)}


def test_n_samples_train_scores_score_the_rows_each_model_trained_on(client):
    # Probe: train scores were taken on the whole training fold, rows the model at a
    # low rung never saw (1-NN scored 0.82 on its "train" rows; scikit-learn: 1.0).
    from sklearn.neighbors import KNeighborsClassifier

    X, y = load_digits(return_X_y=True)
    search = _search(
        client,
        KNeighborsClassifier(n_neighbors=1),
        space={"weights": ["uniform", "distance"], "p": [1, 2]},
        strategy="grid",
        scheduler="halving",
        resource="n_samples",
        min_resource=None,
        max_resource=None,
        return_train_score=True,
    ).fit(X[:400], y[:400])
    r = search.cv_results_
    assert len(set(r["n_resources"].tolist())) > 1
    assert np.all(r["mean_train_score"] == 1.0)


def test_a_refit_callable_index_is_checked_with_a_scheduler(steady, digits):
    # Probe: 10_000 raised a bare IndexError after the search, -1 picked the last row.
    X, y = digits
    for bad in (10_000, -1):
        with pytest.raises(InvalidParameterError, match=r"must return an index in \[0, "):
            _search(steady, n_trials=3, max_resource=3, refit=lambda r, bad=bad: bad).fit(X, y)
    search = _search(steady, n_trials=3, max_resource=3, refit=lambda r: 0).fit(X, y)
    assert search.best_index_ == 0


def test_trials_dataframe_of_a_rung_search_names_each_steps_rung(steady, digits):
    # Probe: one row per step, but nothing told a trial's rungs apart.
    X, y = digits
    search = _search(steady, scheduler="halving", n_trials=9, max_resource=9).fit(X, y)
    frame = search.trials_dataframe()
    r = search.cv_results_
    assert len(frame) == len(r["trial"])
    assert frame["n_resources"].tolist() == r["n_resources"].tolist()
    assert frame["iter"].tolist() == r["iter"].tolist()
    assert frame["number"].tolist() == r["trial"].tolist()
