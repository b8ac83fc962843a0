"""Bad input everywhere (docs/reliability.md): malformed search spaces, SearchCV parameters
and registry calls raise dmlsearch's own errors, with a message, before any work.

Each property draws wrong types and awkward values (NUL characters, lone surrogates,
integers past 64 bits, NaN, records where names are expected) and accepts exactly two
outcomes: the call works, or it raises a ``DmlsearchError``. A raw ``TypeError``,
``KeyError``, ``AttributeError`` or database driver error fails it. "Before any work":
``SearchCV.fit`` must refuse before it asks for a cluster, a refused registration writes no
blob.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, make_scorer

import dmlsearch.runner
import dmlsearch.runner.cluster
import dmlsearch.search
from dmlsearch import Registry, SearchCV
from dmlsearch._validation import cv_splits
from dmlsearch.exceptions import DmlsearchError, InvalidParameterError, SearchSpaceError
from dmlsearch.registry import ExperimentRecord, ModelVersionRecord
from dmlsearch.space import Categorical, Float, Int, as_space

EXAMPLES = settings(
    max_examples=int(os.environ.get("DMLSEARCH_BAD_INPUT_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Values that break naive code: blank, NUL, a lone surrogate, over-long, alias syntax.
AWKWARD_TEXT = ["", " ", "\x00", "a\x00b", "\ud800", "clf@", "@x", "x" * 300, "\n"]

RECORD = ModelVersionRecord(
    model="clf",
    version=1,
    artifact_uri="file:///x",
    sha256="0" * 64,
    format="skops",
    metrics={},
    signature=None,
    lineage={},
    trusted_types=[],
    tags={},
    aliases=[],
    created=0.0,
)
EXPERIMENT = ExperimentRecord(
    id=1,
    name="e",
    status="complete",
    created=0.0,
    config={},
    package_versions={},
    data_fingerprint=None,
    cluster={},
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(AWKWARD_TEXT),
    st.binary(max_size=4),
    st.just(RECORD),
    st.just(EXPERIMENT),
    st.builds(object),
    st.just(np.float64("nan")),
    st.just(np.int64(3)),
)
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), inner, max_size=3),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=6,
)


def refused_or_fine(call: Callable[[], Any]) -> DmlsearchError | None:
    """Run ``call``: None if it worked, the error if it raised one of ours (with a message)."""
    try:
        call()
    except DmlsearchError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return exc
    return None


# -- search spaces -----------------------------------------------------------------------------

dimensions = st.one_of(
    st.builds(Float, junk, junk, junk),
    st.builds(Int, junk, junk, junk, junk),
    st.builds(Categorical, junk),
)
names = st.one_of(
    st.sampled_from(["C", "tol", "max_iter", "no_such", "C__x", *AWKWARD_TEXT]),
    st.none(),
    st.integers(),
    st.text(max_size=8),
)
values = st.one_of(
    junk,
    st.lists(junk, max_size=4),
    st.just(np.zeros((2, 2))),
    st.just(scipy.stats.randint(5, 1)),
    st.just(scipy.stats.norm(0, -1)),
    st.just(scipy.stats.uniform(0, 1)),
)
spaces = st.one_of(
    junk,
    st.dictionaries(names, values, max_size=3),
    st.lists(st.dictionaries(names, values, max_size=3), max_size=3),
)


@EXAMPLES
@given(st.data())
def test_dimensions_with_bad_arguments_raise_search_space_error(data: st.DataObject) -> None:
    try:
        dim = data.draw(dimensions)
    except SearchSpaceError as exc:
        assert str(exc).strip()
        return
    # A dimension that was accepted samples without error.
    dim.sample(np.random.default_rng(0))


@EXAMPLES
@given(spaces)
def test_malformed_search_spaces_raise_search_space_error(space: Any) -> None:
    error = refused_or_fine(lambda: as_space(space))
    if error is None:
        as_space(space).sample(np.random.default_rng(0))  # accepted: it can be drawn from
    else:
        assert isinstance(error, SearchSpaceError)


# -- SearchCV ----------------------------------------------------------------------------------


class WorkStarted(Exception):
    """Raised where SearchCV.fit would reach the cluster."""


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise WorkStarted

    for module in (dmlsearch.search, dmlsearch.runner, dmlsearch.runner.cluster):
        monkeypatch.setattr(module, "resolve_client", refuse, raising=False)
    monkeypatch.setattr(dmlsearch.runner.cluster, "start_local_cluster", refuse)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return make_classification(n_samples=30, n_features=4, n_informative=2, random_state=0)


_DEFAULT = object()


def fit_outcome(data: Any, estimator: Any = _DEFAULT, **params: Any) -> DmlsearchError | None:
    """The error SearchCV.fit raised before any work, or None if it went on to the cluster."""
    search = SearchCV(
        LogisticRegression() if estimator is _DEFAULT else estimator,
        params.pop("search_space", {"C": [1.0]}),
        **{"progress": False, **params},
    )
    try:
        return refused_or_fine(lambda: search.fit(*data))
    except WorkStarted:
        return None


@EXAMPLES
@given(space=spaces)
def test_search_cv_refuses_malformed_spaces_before_any_work(
    no_work: None, data: Any, space: Any
) -> None:
    error = fit_outcome(data, search_space=space)
    assert error is None or isinstance(error, InvalidParameterError), error


PARAMETERS = [
    "strategy", "n_trials", "cv", "scoring", "refit", "error_score", "return_train_score",
    "random_state", "max_concurrent_trials", "trial_timeout", "time_budget",
    "time_budget_policy", "max_retries", "progress", "experiment_name", "resume",
    "dashboard", "keep_oof", "scheduler", "resource", "min_resource", "max_resource",
    "reduction_factor", "registry",
]  # fmt: skip


@EXAMPLES
@given(name=st.sampled_from([*PARAMETERS, "estimator"]), value=junk)
def test_search_cv_parameters_of_any_type_fail_only_with_our_errors(
    no_work: None, data: Any, name: str, value: Any
) -> None:
    if name == "registry" and isinstance(value, str):
        value = f"not-a-url-{value!r}"  # never a database a random string could name
    error = (
        fit_outcome(data, estimator=value)
        if name == "estimator"
        else fit_outcome(data, **{name: value})
    )
    # A registry URL that names no database is a RegistryError; everything else is named.
    assert error is None or isinstance(error, InvalidParameterError) or name == "registry"


BAD_PARAMETERS = [
    ("estimator", LogisticRegression, "estimator"),
    ("estimator", None, "estimator"),
    ("cv", 0, "cv"),
    ("cv", 1, "cv"),
    ("cv", "five", "cv"),
    ("cv", 1.5, "cv"),
    ("cv", object(), "cv"),
    ("return_train_score", "yes", "return_train_score"),
    ("return_train_score", None, "return_train_score"),
    ("n_trials", 0, "n_trials"),
    ("n_trials", 1.5, "n_trials"),
    ("max_retries", -1, "max_retries"),
    ("trial_timeout", float("inf"), "trial_timeout"),
    ("time_budget_policy", "later", "time_budget_policy"),
    ("error_score", "ignore", "error_score"),
    ("random_state", -1, "random_state"),
    ("random_state", "seed", "random_state"),
    ("refit", 3, "refit"),
    ("refit", "f1_macro", "refit"),  # one scorer (the estimator's score): picked by it
    ("resume", "yes", "resume"),
    ("resume", True, "resume"),  # without a registry and an experiment name
    ("progress", "yes", "progress"),
    ("experiment_name", " ", "experiment_name"),
    ("experiment_name", "svc@v2", "experiment_name"),  # the model's name: 'svc@v2' is an alias
    ("experiment_name", "svc\n", "experiment_name"),
    ("experiment_name", "a\tb", "experiment_name"),
    ("dashboard", None, "dashboard"),
    ("registry", 3, "registry"),
    ("strategy", "no_such_strategy", "strategy"),
    ("scoring", "no_such_metric", "scoring"),
    ("search_space", {"no_such_param": [1, 2]}, "search_space"),
    ("search_space", {"C": scipy.stats.randint(5, 1)}, "search_space['C']"),
    ("search_space", {"C": "1.0"}, "search_space['C']"),
    ("search_space", [], "search_space"),
]


@pytest.mark.parametrize(("name", "value", "param"), BAD_PARAMETERS)
def test_each_bad_parameter_is_named_before_any_work(
    no_work: None, data: Any, name: str, value: Any, param: str
) -> None:
    if name == "estimator":
        error = fit_outcome(data, estimator=value)
    else:
        error = fit_outcome(data, **{name: value})
    assert isinstance(error, InvalidParameterError), f"{name}={value!r} was accepted"
    assert error.param == param, error


def test_a_misspelt_xgboost_parameter_is_refused_though_xgboost_takes_any(
    no_work: None, data: Any
) -> None:
    xgboost = pytest.importorskip("xgboost")
    error = fit_outcome(data, estimator=xgboost.XGBClassifier(), search_space={"max_dept": [2]})
    assert isinstance(error, InvalidParameterError) and error.param == "search_space"
    assert "did you mean 'max_depth'?" in str(error)
    eta = fit_outcome(data, estimator=xgboost.XGBClassifier(), search_space={"eta": [0.1]})
    assert eta is None  # a booster alias the wrapper does not name goes through


def test_refit_naming_another_metric_than_the_one_scorer_is_refused(
    no_work: None, data: Any
) -> None:
    # scikit-learn picks by accuracy here, silently; the experiment file refused it already.
    error = fit_outcome(data, scoring="accuracy", refit="f1_macro")
    assert isinstance(error, InvalidParameterError) and error.param == "refit"
    assert "scoring=['accuracy', 'f1_macro'] with refit='f1_macro'" in str(error)
    assert fit_outcome(data, scoring="accuracy", refit="accuracy") is None
    # A callable's hint names a dict, not a list (which refuses callables).
    scorer = make_scorer(accuracy_score)
    error = fit_outcome(data, scoring=scorer, refit="acc")
    assert isinstance(error, InvalidParameterError) and error.param == "refit"
    assert "scoring={'acc': <the callable>} with refit='acc'" in str(error)
    assert fit_outcome(data, scoring={"acc": scorer}, refit="acc") is None
    error = fit_outcome(data, scoring=None, refit="accuracy")
    assert "pass scoring='accuracy'" in str(error) and "refit=True" in str(error)


@pytest.mark.parametrize("scheduler", [None, "asha"])
def test_xgboost_early_stopping_without_an_eval_set_is_refused_before_any_work(
    no_work: None, data: Any, scheduler: str | None
) -> None:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from xgboost import XGBClassifier

    fidelity = {"scheduler": scheduler, "resource": "n_estimators", "max_resource": 9}
    kwargs = fidelity if scheduler else {}
    cases = [
        (XGBClassifier(early_stopping_rounds=3), {"max_depth": [2, 3]}, ""),
        (
            make_pipeline(StandardScaler(), XGBClassifier()),
            {"xgbclassifier__early_stopping_rounds": [2, 5]},
            "xgbclassifier__",
        ),
    ]
    from xgboost.callback import EarlyStopping

    for estimator, space, prefix in cases:
        search = SearchCV(estimator, space, progress=False, **kwargs)
        with pytest.raises(InvalidParameterError, match=f"{prefix}eval_set=") as caught:
            search.fit(*data)
        assert caught.value.param == f"{prefix}early_stopping_rounds"
    callback = XGBClassifier(callbacks=[EarlyStopping(rounds=3)])
    with pytest.raises(InvalidParameterError, match="eval_set=") as caught:
        SearchCV(callback, {"max_depth": [2, 3]}, progress=False, **kwargs).fit(*data)
    assert caught.value.param == "callbacks"


def test_a_client_that_is_not_one_is_refused_before_a_cluster_starts(data: Any) -> None:
    for client in (3, object(), RECORD):
        search = SearchCV(LogisticRegression(), {"C": [1.0]}, client=client, progress=False)
        with pytest.raises(InvalidParameterError, match="client"):
            search.fit(*data)


@pytest.mark.parametrize(
    ("cv", "match"),
    [
        (1000, "cannot split the data"),  # more folds than rows
        ([(np.arange(10), np.arange(10, 40))], "indices must be in"),
        ([(np.arange(10), np.array([], dtype=int))], "empty"),
        ([(1, 2)], "1-d array"),
        ([(np.arange(5),)], r"\(train, test\) pair"),
        ([(np.zeros((2, 2), dtype=int), np.arange(5))], "1-d array"),
    ],
)
def test_cv_splits_that_cannot_work_on_the_data_are_named(data: Any, cv: Any, match: str) -> None:
    X, y = data
    with pytest.raises(InvalidParameterError, match=match) as info:
        cv_splits(cv, X, y, None, classifier=True)
    assert info.value.param == "cv"
    good = cv_splits([(np.arange(20), np.arange(20, 30))], X, y, None, classifier=True)
    assert [len(part) for part in good[0]] == [20, 10]


def _dask_data(data: Any) -> dict[str, tuple[Any, Any, str, str]]:
    """Dask collections the folds cannot index: (X, y, the argument named, the advice)."""
    import pandas as pd

    da = pytest.importorskip("dask.array")
    dd = pytest.importorskip("dask.dataframe")
    X, y = data
    frame = dd.from_pandas(pd.DataFrame(X, columns=list("abcd")), npartitions=3)
    unknown = da.from_array(X, chunks=10)
    unknown = unknown[unknown[:, 0] > -np.inf]  # a boolean mask: chunk sizes unknown (nan)
    return {
        "DataFrame X": (frame, y, "X", r"a Dask DataFrame .* X\.compute\(\)"),
        "Series y": (X, dd.from_pandas(pd.Series(y), npartitions=3), "y", r"y\.compute\(\)"),
        "unknown chunks": (unknown, y, "X", r"X\.compute_chunk_sizes\(\)"),
    }


@pytest.mark.parametrize("case", ["DataFrame X", "Series y", "unknown chunks"])
def test_dask_data_the_folds_cannot_index_is_refused_before_any_work(
    no_work: None, monkeypatch: pytest.MonkeyPatch, data: Any, case: str
) -> None:
    from dmlsearch.ensemble import EnsembleSelection, StackingClassifier, selection, stacking

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise WorkStarted

    for module in (stacking, selection):  # the multi-fidelity search: no_work's
        monkeypatch.setattr(module, "resolve_client", refuse)
    X, y, param, advice = _dask_data(data)[case]
    fits: list[Callable[[], Any]] = [
        lambda: StackingClassifier([("lr", LogisticRegression())], cv=3).fit(X, y),
        lambda: EnsembleSelection(SearchCV(LogisticRegression(), {"C": [1.0]})).fit(X, y),
    ]
    search = SearchCV(LogisticRegression(), {"C": [1.0]}, progress=False)
    fits.append(lambda: search.fit(X, y))
    multi = SearchCV(
        LogisticRegression(), {"C": [1.0, 2.0]}, scheduler="asha", resource="n_samples",
        progress=False,
    )  # fmt: skip
    fits.append(lambda: multi.fit(X, y))
    for fit in fits:
        with pytest.raises(InvalidParameterError, match=advice) as info:
            fit()
        assert info.value.param == param


def test_a_dask_array_of_known_chunks_passes_the_data_checks(data: Any) -> None:
    da = pytest.importorskip("dask.array")
    X, y = data
    splits = cv_splits(3, da.from_array(X, chunks=10), y, None, classifier=True)
    assert len(splits) == 3


def _with_missing(y: np.ndarray) -> dict[str, Any]:
    import pandas as pd

    labels = np.where(y == 1, "yes", "no").astype(object)
    labels[[3, 7]] = None
    boolean = pd.Series(pd.array(y.astype(bool), dtype="boolean"))
    boolean[[3, 7]] = pd.NA
    floats = y.astype(float)
    floats[[3, 7]] = np.nan
    return {"text": labels, "nullable boolean": boolean, "floats": floats}


@pytest.mark.parametrize("kind", ["text", "nullable boolean", "floats"])
def test_missing_target_values_are_named_before_the_split(
    no_work: None, data: Any, kind: str
) -> None:
    # Before, the split failed: "cv: cannot split the data: '<' not supported between
    # instances of 'float' and 'str'" or "... Input y contains NaN", naming cv.
    X, y = data
    y_missing = _with_missing(y)[kind]
    error = fit_outcome((X, y_missing))
    assert isinstance(error, InvalidParameterError) and error.param == "y", error
    assert "has 2 missing values (rows 3, 7, counted from 0)" in str(error)
    with pytest.raises(InvalidParameterError, match="missing values"):
        cv_splits(3, X, y_missing, None, classifier=False)


def test_data_without_rows_is_named_before_the_split(no_work: None, data: Any) -> None:
    X, y = data
    error = fit_outcome((X[:0], y[:0]))
    assert isinstance(error, InvalidParameterError) and error.param == "X", error
    assert "has no rows" in str(error)


# -- registry ----------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema

    folder = tmp_path_factory.mktemp(f"bad-input-{request.param}")
    if request.param == "sqlite":
        with Registry(f"sqlite:///{folder / 'r.db'}", str(folder / "artifacts")) as reg:
            reg.register_model("clf", LogisticRegression())
            yield reg
    else:
        url = os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)
        with postgres_schema(url) as scoped, Registry(scoped, str(folder / "artifacts")) as reg:
            reg.register_model("clf", LogisticRegression())
            yield reg


REGISTRY_CALLS: dict[str, Callable[[Registry, Any], Any]] = {
    "load_model(name)": lambda r, v: r.load_model(v),
    "load_model(version=)": lambda r, v: r.load_model("clf", version=v),
    "load_model(alias=)": lambda r, v: r.load_model("clf", alias=v),
    "model_version(name)": lambda r, v: r.model_version(v),
    "versions(name)": lambda r, v: r.versions(v),
    "set_alias(alias)": lambda r, v: r.set_alias("clf", v, 1),
    "set_alias(version)": lambda r, v: r.set_alias("clf", "champion", v),
    "set_alias(name)": lambda r, v: r.set_alias(v, "champion", 1),
    "delete_alias(alias)": lambda r, v: r.delete_alias("clf", v),
    "delete_version(version)": lambda r, v: r.delete_version("no-such-model", v),
    "experiment(name_or_id)": lambda r, v: r.experiment(v),
    "trials(experiment)": lambda r, v: r.trials(v),
    "trials(state=)": lambda r, v: r.trials("no-such-experiment", state=v),
    "leaderboard(k=)": lambda r, v: r.leaderboard("no-such-experiment", k=v),
    "delete_experiment(name_or_id)": lambda r, v: r.delete_experiment(v),
    "search_models(name=)": lambda r, v: r.search_models(name=v),
    "search_models(tag=)": lambda r, v: r.search_models(tag=v),
    "search_models(metric=)": lambda r, v: r.search_models(metric=v),
    "search_models(min_value=)": lambda r, v: r.search_models(metric="score", min_value=v),
    "search_models(offset=)": lambda r, v: r.search_models(offset=v),
    "search_models(limit=)": lambda r, v: r.search_models(limit=v),
    "gc(grace_seconds=)": lambda r, v: r.gc(dry_run=True, grace_seconds=v),
    "gc(dry_run=)": lambda r, v: r.gc(dry_run=v, grace_seconds=3600),
}
REGISTER_ARGUMENTS = [
    "name", "metrics", "experiment", "trial", "data_fingerprint", "signature", "lineage",
    "allow_pickle",
]  # fmt: skip


@EXAMPLES
@given(call=st.sampled_from(sorted(REGISTRY_CALLS)), value=junk)
def test_registry_calls_with_any_argument_fail_only_with_our_errors(
    registry: Registry, call: str, value: Any
) -> None:
    refused_or_fine(lambda: REGISTRY_CALLS[call](registry, value))


@EXAMPLES
@given(argument=st.sampled_from(REGISTER_ARGUMENTS), value=junk)
def test_register_model_refuses_bad_arguments_before_writing(
    registry: Registry, argument: str, value: Any
) -> None:
    kwargs: dict[str, Any] = {"name": "junk-target", argument: value}
    before = {b.path for b in registry.artifacts.blobs()}
    model = LogisticRegression(C=0.5)
    error = refused_or_fine(lambda: registry.register_model(model=model, **kwargs))
    if isinstance(error, InvalidParameterError):
        assert {b.path for b in registry.artifacts.blobs()} == before  # nothing written


@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda r: r.load_model(RECORD), "name"),
        (lambda r: r.load_model(3), "name"),
        (lambda r: r.load_model("clf", version=-1), "version"),
        (lambda r: r.load_model("clf", version=0), "version"),
        (lambda r: r.load_model("clf", version=2**31), "version"),
        (lambda r: r.load_model("clf", version="1"), "version"),
        (lambda r: r.load_model("clf", alias=""), "alias"),
        (lambda r: r.load_model("clf", alias="a\x00b"), "alias"),
        (lambda r: r.load_model("\ud800"), "name"),
        (lambda r: r.set_alias("clf", " ", 1), "alias"),
        (lambda r: r.set_alias("clf", "champion", None), "version"),
        (lambda r: r.versions(None), "name"),
        (lambda r: r.experiment(EXPERIMENT), "name_or_id"),
        (lambda r: r.experiment(2**40), "name_or_id"),
        (lambda r: r.trials("e", state=3), "state"),
        (lambda r: r.leaderboard("e", k=-1), "k"),
        (lambda r: r.search_models(tag="key=value"), "tag"),
        (lambda r: r.search_models(offset=None), "offset"),
        (lambda r: r.search_models(limit=2**64), "limit"),
        (lambda r: r.search_models(metric="score", min_value="high"), "min_value"),
        (lambda r: r.search_models(metric="score", min_value=float("nan")), "min_value"),
        (lambda r: r.register_model("c", LogisticRegression(), metrics=[("a", 1)]), "metrics"),
        (lambda r: r.register_model("c", LogisticRegression(), metrics={1: 0.5}), "metrics"),
        (lambda r: r.register_model("c", LogisticRegression(), lineage="x"), "lineage"),
        (lambda r: r.register_model("c", LogisticRegression(), trial=-1), "trial"),
        (lambda r: r.register_model("c", LogisticRegression(), allow_pickle="no"), "allow_pickle"),
        (lambda r: r.register_model("c", LogisticRegression(), data_fingerprint=3), "data_fingerprint"),
        (lambda r: r.register_model("a\x00b", LogisticRegression()), "name"),
        (lambda r: r.register_model(" ", LogisticRegression()), "name"),
        (lambda r: r.register_model("clf@prod", LogisticRegression()), "name"),
        (lambda r: r.register_model("clf ", LogisticRegression()), "name"),
        (lambda r: r.register_model("c\nlf", LogisticRegression()), "name"),
        (lambda r: r.set_alias("clf", "latest", 1), "alias"),
        (lambda r: r.set_alias("clf", "1", 1), "alias"),
        (lambda r: r.set_alias("clf", "v1", 1), "alias"),
        (lambda r: r.set_alias("clf", "prod\t", 1), "alias"),
        (lambda r: r.set_alias("clf", "pr\nod", 1), "alias"),
        (lambda r: r.gc(grace_seconds=-1), "grace_seconds"),
    ],
)  # fmt: skip
def test_each_bad_registry_argument_is_named(
    registry: Registry, call: Callable[[Registry], Any], param: str
) -> None:
    with pytest.raises(InvalidParameterError) as info:
        call(registry)
    assert info.value.param == param, info.value
    assert [v.version for v in registry.versions("clf")] == [1]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [({"url": ""}, "url"), ({"url": 3}, "url"), ({"artifacts": " "}, "artifacts")],
)
def test_registry_locations_that_are_not_locations(
    tmp_path: Path, kwargs: dict[str, Any], param: str
) -> None:
    kwargs.setdefault("url", f"sqlite:///{tmp_path / 'r.db'}")
    with pytest.raises(InvalidParameterError) as info:
        Registry(**kwargs)
    assert info.value.param == param
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("name", ["exp\n", " exp", "a\tb"])
def test_optimize_refuses_an_experiment_name_that_does_not_print_as_typed(
    no_work: None, name: str
) -> None:
    from dmlsearch import optimize

    with pytest.raises(InvalidParameterError) as info:
        optimize(lambda p, t: 0.0, {"x": Float(0, 1)}, n_trials=1, experiment_name=name)
    assert info.value.param == "experiment_name"
