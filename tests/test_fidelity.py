"""Fidelity helpers on real scikit-learn estimators: continue where it holds, refit where not."""

from __future__ import annotations

import copy
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.ensemble import (
    AdaBoostClassifier,
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.fidelity import (
    check_resource,
    subsample,
    train,
    train_n_samples,
    train_param,
    train_partial_fit,
)

X, Y = make_classification(n_samples=240, n_features=8, n_informative=5, random_state=0)

#: partial_fit calls made by every CountingSGD, all instances together.
CALLS: list[int] = []


class CountingSGD(SGDClassifier):
    """SGDClassifier that counts its partial_fit calls (the work actually done)."""

    def partial_fit(self, X: Any, y: Any, classes: Any = None, sample_weight: Any = None) -> Any:
        CALLS.append(1)
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


# ---------------------------------------------------------------- what an estimator can take


@pytest.mark.parametrize(
    ("resource", "estimator", "words"),
    [
        ("partial_fit", RandomForestClassifier(), ["partial_fit", "RandomForestClassifier"]),
        # A Pipeline's step parameters named, as the probe expected them.
        (
            "partial_fit",
            make_pipeline(StandardScaler(), SGDClassifier()),
            ["Pipeline has none", "['sgdclassifier__max_iter']"],
        ),
        (
            "n_estimators",
            make_pipeline(StandardScaler(), RandomForestClassifier()),
            ["did you mean ['randomforestclassifier__n_estimators']"],
        ),
        (
            "n_estimator",
            RandomForestClassifier(),
            ["'n_estimator'", "did you mean", "n_estimators"],
        ),
        ("rounds", LogisticRegression(), ["LogisticRegression", "'rounds'", "n_samples"]),
        ("", LogisticRegression(), ["partial_fit", "n_samples"]),
        (3, LogisticRegression(), ["got 3"]),
        # Named, but it takes no counts (scikit-learn's constraints say so).
        ("penalty", SGDClassifier(), ["'penalty' parameter of SGDClassifier", "'max_iter'"]),
        (
            "sgdclassifier__loss",
            make_pipeline(StandardScaler(), SGDClassifier()),
            ["'loss' parameter of SGDClassifier", "counts training units"],
        ),
    ],
)
def test_a_resource_the_estimator_cannot_take_is_refused(
    resource: Any, estimator: Any, words: list[str]
) -> None:
    with pytest.raises(InvalidParameterError) as info:
        check_resource(resource, estimator)
    assert info.value.param == "resource"
    for word in words:
        assert word in str(info.value)


def test_resources_the_estimator_can_take() -> None:
    assert check_resource("partial_fit", SGDClassifier()) == "partial_fit"
    assert check_resource("n_samples", LogisticRegression()) == "n_samples"
    pipe = make_pipeline(StandardScaler(), RandomForestClassifier())
    assert check_resource("randomforestclassifier__n_estimators", pipe)
    assert check_resource("max_iter", SGDClassifier()) == "max_iter"


@pytest.mark.parametrize(
    ("resource", "previous", "words"),
    [(0, 0, ["resource", ">= 1"]), (3, 5, ["previous (5)", "got 3"]), (2.0, 0, ["2.0"])],
)
def test_a_bad_budget_is_refused(resource: Any, previous: Any, words: list[str]) -> None:
    with pytest.raises(InvalidParameterError) as info:
        train_partial_fit(SGDClassifier(), X, Y, resource, previous)
    for word in words:
        assert word in str(info.value)


# ---------------------------------------------------------------- partial_fit


def test_partial_fit_continues_to_the_same_model_and_counts_each_call_once() -> None:
    CALLS.clear()
    state = CountingSGD(random_state=0)
    steps = []
    previous = 0
    for resource in (1, 3, 9):
        step = train_partial_fit(state, X, Y, resource, previous)
        steps.append(step)
        state, previous = step.estimator, resource
    # The work across rungs is the work of the highest rung: 9 calls, not 1 + 3 + 9.
    assert len(CALLS) == 9 == sum(s.work for s in steps)
    assert [s.continued for s in steps] == [False, True, True]
    once = train_partial_fit(CountingSGD(random_state=0), X, Y, 9)
    assert np.array_equal(state.coef_, once.estimator.coef_)
    assert np.array_equal(state.predict(X), once.estimator.predict(X))


def test_partial_fit_never_changes_the_state_it_continues() -> None:
    first = train_partial_fit(MLPClassifier(hidden_layer_sizes=(8,), random_state=0), X, Y, 3)
    before = copy.deepcopy(first.estimator.coefs_)
    more = train_partial_fit(first.estimator, X, Y, 10, 3)
    assert all(np.array_equal(a, b) for a, b in zip(before, first.estimator.coefs_, strict=True))
    once = train_partial_fit(MLPClassifier(hidden_layer_sizes=(8,), random_state=0), X, Y, 10)
    assert more.continued and more.work == 7
    assert all(
        np.array_equal(a, b)
        for a, b in zip(more.estimator.coefs_, once.estimator.coefs_, strict=True)
    )


def test_partial_fit_from_an_unfitted_state_refits_and_says_so() -> None:
    step = train_partial_fit(SGDClassifier(random_state=0), X, Y, 4, previous=2)
    assert not step.continued and step.work == 4 and step.previous == 2
    assert list(step.estimator.classes_) == [0, 1]


# ---------------------------------------------------------------- estimator parameters


@pytest.mark.parametrize(
    ("estimator", "param"),
    [
        (RandomForestClassifier(n_estimators=1, random_state=0), "n_estimators"),
        (GradientBoostingClassifier(n_estimators=1, random_state=0), "n_estimators"),
        (
            GradientBoostingClassifier(n_estimators=1, subsample=0.7, random_state=0),
            "n_estimators",
        ),
        (HistGradientBoostingClassifier(early_stopping=False, random_state=0), "max_iter"),
        (
            make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=1, random_state=0)),
            "randomforestclassifier__n_estimators",
        ),
    ],
    ids=["forest", "boosting", "boosting-subsample", "hist-boosting", "pipeline"],
)
def test_warm_start_ensembles_grow_to_the_same_model(estimator: Any, param: str) -> None:
    small = train_param(estimator, X, Y, 4, param=param)
    grown = train_param(small.estimator, X, Y, 12, 4, param=param)
    once = train_param(estimator, X, Y, 12, param=param)
    assert (small.continued, grown.continued, once.continued) == (False, True, False)
    assert (small.work, grown.work) == (4, 8)
    assert np.array_equal(grown.estimator.predict_proba(X), once.estimator.predict_proba(X))
    # The helper set warm_start for the fit only; the state it continued from is untouched.
    warm = param.rpartition("__")[0] + "__warm_start" if "__" in param else "warm_start"
    assert grown.estimator.get_params()[warm] is False
    assert small.estimator.get_params()[param] == 4
    assert estimator.get_params()[warm] is False


@pytest.mark.parametrize(
    ("estimator", "param"),
    [
        (
            GradientBoostingClassifier(n_estimators=1, n_iter_no_change=2, random_state=0),
            "n_estimators",
        ),
        (HistGradientBoostingClassifier(early_stopping=True, random_state=0), "max_iter"),
        (
            make_pipeline(StandardScaler(), SGDClassifier(early_stopping=True, random_state=0)),
            "sgdclassifier__max_iter",
        ),
    ],
    ids=["boosting-n_iter_no_change", "hist-boosting-early-stopping", "pipeline-sgd"],
)
def test_models_that_stop_early_refit_instead_of_continuing(estimator: Any, param: str) -> None:
    # Warm-started, they would forget their early-stopping history and grow past where a
    # fit from scratch stops: the step would not be the model of its resource.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        small = train_param(estimator, X, Y, 3, param=param)
        grown = train_param(small.estimator, X, Y, 27, 3, param=param)
        once = train_param(estimator, X, Y, 27, param=param)
    assert not grown.continued and grown.work == 27
    assert np.array_equal(grown.estimator.predict(X), once.estimator.predict(X))


def test_warm_start_forest_trains_only_the_new_trees() -> None:
    small = train_param(RandomForestClassifier(random_state=0), X, Y, 3, param="n_estimators")
    grown = train_param(small.estimator, X, Y, 7, 3, param="n_estimators")
    assert len(small.estimator.estimators_) == 3 and len(grown.estimator.estimators_) == 7
    for old, kept in zip(small.estimator.estimators_, grown.estimator.estimators_[:3], strict=True):
        assert np.array_equal(old.tree_.threshold, kept.tree_.threshold)
    same = train_param(grown.estimator, X, Y, 7, 7, param="n_estimators")
    assert same.continued and same.work == 0 and len(same.estimator.estimators_) == 7


def test_logistic_regression_max_iter_continues_from_its_solution() -> None:
    short = train_param(LogisticRegression(), X, Y, 2, param="max_iter")
    assert short.estimator.n_iter_[0] == 2
    longer = train_param(short.estimator, X, Y, 200, 2, param="max_iter")
    once = train_param(LogisticRegression(), X, Y, 200, param="max_iter")
    assert longer.continued and longer.work == 198
    # max_iter counts iterations per fit: the continuation ran at most 198 more.
    assert longer.estimator.n_iter_[0] <= 198
    # lbfgs restarts its curvature memory, so the path differs; both reach the optimum.
    np.testing.assert_allclose(longer.estimator.coef_, once.estimator.coef_, atol=1e-2)
    assert np.array_equal(longer.estimator.predict(X), once.estimator.predict(X))
    # A converged model continued needs (almost) no iteration: it starts from its solution.
    again = train_param(once.estimator, X, Y, 400, 200, param="max_iter")
    assert again.continued and again.estimator.n_iter_[0] <= 1


@pytest.mark.parametrize(
    ("estimator", "param"),
    [
        # warm_start grows n_estimators and max_iter only: a deeper forest refitted
        # warm keeps its old trees (probe: every promoted rung scored the first one).
        (RandomForestClassifier(n_estimators=5, random_state=0), "max_depth"),
        (ExtraTreesClassifier(n_estimators=5, random_state=0), "max_depth"),
        # liblinear ignores warm_start: "continued" to 4 it held a 2-iteration fit.
        (LogisticRegression(solver="liblinear"), "max_iter"),
    ],
)
def test_a_warm_start_that_would_not_train_on_refits_to_the_model_of_its_resource(
    estimator: Any, param: str
) -> None:
    small = train_param(estimator, X, Y, 2, param=param)
    more = train_param(small.estimator, X, Y, 6, 2, param=param)
    once = train_param(estimator, X, Y, 6, param=param)
    assert not more.continued and more.work == 6
    assert more.estimator.get_params()[param] == 6
    np.testing.assert_array_equal(more.estimator.predict_proba(X), once.estimator.predict_proba(X))


def test_a_trained_model_keeps_the_warm_start_its_owner_set() -> None:
    # Probe: best_estimator_ came back warm_start=True; a fit on new data kept its trees.
    fresh = train_param(RandomForestClassifier(random_state=0), X, Y, 3, param="n_estimators")
    grown = train_param(fresh.estimator, X, Y, 6, 3, param="n_estimators")
    assert grown.continued and len(grown.estimator.estimators_) == 6
    for step in (fresh, grown):
        assert step.estimator.warm_start is False
    assert grown.estimator.n_estimators == 6
    lr = train_param(LogisticRegression(), X, Y, 2, param="max_iter")
    longer = train_param(lr.estimator, X, Y, 5, 2, param="max_iter")
    assert longer.continued and longer.estimator.max_iter == 5
    assert longer.estimator.warm_start is False
    # A model whose owner asked for warm starts keeps asking.
    warm = RandomForestClassifier(random_state=0, warm_start=True)
    assert train_param(warm, X, Y, 3, param="n_estimators").estimator.warm_start is True


def test_partial_fit_takes_classes_from_the_fit_parameters() -> None:
    # fit(X, y, classes=...) as partial_fit's users write it failed every step
    # ("got multiple values for keyword argument 'classes'").
    step = train_partial_fit(
        SGDClassifier(random_state=0), X[Y == 0], Y[Y == 0], 2, fit_params={"classes": [0, 1]}
    )
    assert list(step.estimator.classes_) == [0, 1]
    refit = train("partial_fit", SGDClassifier(), X, Y, 2, fit_params={"classes": [0, 1, 2]})
    assert list(refit.estimator.classes_) == [0, 1, 2]


def test_partial_fit_of_a_multi_output_classifier_gets_classes_per_output() -> None:
    # np.unique of a 2-D y flattened it: MultiOutputClassifier.partial_fit failed every
    # step ("Unknown label type").
    from sklearn.multioutput import MultiOutputClassifier

    multi = np.column_stack([Y, X[:, 0] > 0, 2 * (X[:, 1] > 0) + Y]).astype(int)
    step = train_partial_fit(MultiOutputClassifier(SGDClassifier(random_state=0)), X, multi, 2)
    fitted = [list(e.classes_) for e in step.estimator.estimators_]
    assert fitted == [[0, 1], [0, 1], [0, 1, 2, 3]]
    assert step.estimator.predict(X).shape == multi.shape


def test_a_parameter_without_warm_start_refits_and_says_so() -> None:
    small = train_param(AdaBoostClassifier(random_state=0), X, Y, 3, param="n_estimators")
    more = train_param(small.estimator, X, Y, 6, 3, param="n_estimators")
    once = train_param(AdaBoostClassifier(random_state=0), X, Y, 6, param="n_estimators")
    assert not more.continued and more.work == 6
    assert np.array_equal(more.estimator.predict(X), once.estimator.predict(X))


# ---------------------------------------------------------------- n_samples


def test_subsample_is_deterministic_nested_and_sorted() -> None:
    small, large = subsample(100, 10, seed=7), subsample(100, 40, seed=7)
    assert np.array_equal(small, subsample(100, 10, seed=7))
    assert set(small) <= set(large) and np.all(np.diff(large) > 0)
    assert not np.array_equal(subsample(100, 40, seed=8), large)
    assert len(subsample(100, 100, seed=0)) == 100
    with pytest.raises(InvalidParameterError, match=r"\[1, 100\].*got 101"):
        subsample(100, 101, seed=0)


def test_n_samples_refits_on_the_subsample() -> None:
    weights = np.linspace(1.0, 2.0, len(Y))
    step = train_n_samples(
        LogisticRegression(), X, Y, 60, 20, seed=3, fit_params={"sample_weight": weights}
    )
    rows = subsample(len(Y), 60, seed=3)
    direct = LogisticRegression().fit(X[rows], Y[rows], sample_weight=weights[rows])
    assert not step.continued and step.work == 60
    assert np.array_equal(step.estimator.coef_, direct.coef_)


def test_train_dispatches_on_the_resource_name() -> None:
    assert train("partial_fit", SGDClassifier(random_state=0), X, Y, 2).work == 2
    assert train("n_samples", LogisticRegression(), X, Y, 50, seed=1).resource == 50
    forest = train("n_estimators", RandomForestClassifier(random_state=0), X, Y, 2)
    assert len(forest.estimator.estimators_) == 2
    with pytest.raises(InvalidParameterError, match="partial_fit"):
        train("partial_fit", RandomForestClassifier(), X, Y, 2)


# ---------------------------------------------------------------- xgboost boosting rounds

#: Boosting rounds trained by every xgboost fit in this module (an xgboost callback counts).
ROUNDS: list[int] = []


def _xgb(**params: Any) -> Any:
    xgboost = pytest.importorskip("xgboost")

    class CountRounds(xgboost.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            ROUNDS.append(epoch)
            return False

    return xgboost.XGBClassifier(
        max_depth=3, tree_method="hist", random_state=0, n_jobs=1, callbacks=[CountRounds()],
        **params,
    )  # fmt: skip


def test_xgboost_rounds_continue_from_the_previous_booster() -> None:
    ROUNDS.clear()
    first = train_param(_xgb(), X, Y, 4, param="n_estimators")
    before = first.estimator.get_booster().save_raw()
    step = train_param(first.estimator, X, Y, 10, previous=4, param="n_estimators")
    assert (first.continued, first.work) == (False, 4)
    assert (step.continued, step.work) == (True, 6)
    assert len(ROUNDS) == 10  # counted by xgboost: 4 + 6 rounds, never 4 + 10
    model = step.estimator
    assert model.get_booster().num_boosted_rounds() == 10 and model.n_estimators == 10
    assert first.estimator.get_booster().save_raw() == before  # the state is not changed
    straight = train_param(_xgb(), X, Y, 10, param="n_estimators").estimator
    assert np.array_equal(model.predict_proba(X), straight.predict_proba(X))
    same = train_param(model, X, Y, 10, previous=10, param="n_estimators")
    assert (same.continued, same.work) == (True, 0)


def test_xgboost_rounds_continue_inside_a_pipeline() -> None:
    pipe = make_pipeline(StandardScaler(), _xgb())
    param = "xgbclassifier__n_estimators"
    first = train_param(pipe, X, Y, 3, param=param)
    step = train_param(first.estimator, X, Y, 9, previous=3, param=param)
    assert (step.continued, step.work) == (True, 6)
    straight = train_param(pipe, X, Y, 9, param=param).estimator
    assert np.array_equal(step.estimator.predict_proba(X), straight.predict_proba(X))


def test_xgboost_training_matrix_is_built_once_per_fold_key() -> None:
    from dmlsearch._xgb_matrices import matrix_stats

    key = ("test-run", 0)
    before = matrix_stats()
    trials = [_xgb(learning_rate=r) for r in (0.1, 0.3, 0.5)]
    firsts = [train_param(t, X, Y, 3, param="n_estimators", matrix_key=key) for t in trials]
    steps = [
        train_param(f.estimator, X.copy(), Y, 7, previous=3, param="n_estimators", matrix_key=key)
        for f in firsts
    ]
    after = matrix_stats()
    # Six fits, one sketch of the rows: the other five fits reuse it.
    assert after["built"] - before["built"] == 1
    assert after["reused"] - before["reused"] == 5
    for trial, step in zip(trials, steps, strict=True):
        straight = train_param(trial, X, Y, 7, param="n_estimators").estimator  # no cache
        assert np.array_equal(step.estimator.predict_proba(X), straight.predict_proba(X))
        assert "_create_dmatrix" not in vars(step.estimator)  # nothing left on the model
    # Another fold (key) or a weighted fit builds its own.
    train_param(_xgb(), X, Y, 2, param="n_estimators", matrix_key=("test-run", 1))
    weighted = {"sample_weight": np.ones(len(Y))}
    train_param(_xgb(), X, Y, 2, param="n_estimators", matrix_key=key, fit_params=weighted)
    assert matrix_stats()["reused"] == after["reused"]


def test_a_consumed_xgboost_state_boosts_in_place_as_rounds_at_once() -> None:
    xgboost = pytest.importorskip("xgboost")
    from dmlsearch._xgb_matrices import matrix_stats

    def model(**params: Any) -> Any:
        return xgboost.XGBClassifier(
            max_depth=3, tree_method="hist", random_state=0, n_jobs=1, **params
        )

    key = ("in-place-run", 0)
    for params in ({}, {"learning_rate": 0.5, "reg_lambda": 3.0}):
        first = train_param(model(**params), X, Y, 3, param="n_estimators", matrix_key=key)
        copied = train_param(first.estimator, X, Y, 7, 3, param="n_estimators", matrix_key=key)
        booster = first.estimator.get_booster()
        before = matrix_stats()["in_place"]
        step = first
        for previous, resource in ((3, 7), (7, 12)):
            step = train_param(
                step.estimator, X, Y, resource, previous, param="n_estimators",
                matrix_key=key, consume=True,
            )  # fmt: skip
            assert (step.continued, step.work) == (True, resource - previous)
        assert matrix_stats()["in_place"] - before == 2
        # The state itself trained on: the same booster, no copy, its rounds all there.
        assert step.estimator is first.estimator and step.estimator.get_booster() is booster
        assert booster.num_boosted_rounds() == 12 and step.estimator.n_estimators == 12
        straight = train_param(model(**params), X, Y, 12, param="n_estimators").estimator
        assert np.array_equal(step.estimator.predict_proba(X), straight.predict_proba(X))
        at_seven = train_param(model(**params), X, Y, 7, param="n_estimators").estimator
        assert np.array_equal(copied.estimator.predict_proba(X), at_seven.predict_proba(X))
    # Three classes (multi:softprob, one tree per class and round) on another fold key.
    y3 = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    first = train_param(model(), X, y3, 2, param="n_estimators", matrix_key=("in-place-run", 3))
    step = train_param(
        first.estimator, X, y3, 6, 2, param="n_estimators", matrix_key=("in-place-run", 3),
        consume=True,
    )  # fmt: skip
    straight = train_param(model(), X, y3, 6, param="n_estimators").estimator
    assert step.estimator is first.estimator
    assert np.array_equal(step.estimator.predict_proba(X), straight.predict_proba(X))


def test_xgboost_boosts_in_place_only_where_fit_would_do_nothing_more() -> None:
    xgboost = pytest.importorskip("xgboost")
    from dmlsearch._xgb_matrices import matrix_stats

    key = ("in-place-run", 1)
    plain = xgboost.XGBClassifier(max_depth=2, tree_method="hist", random_state=0, n_jobs=1)
    weights = {"sample_weight": np.ones(len(Y))}
    for state, kwargs in (
        (_xgb(), {"matrix_key": key}),  # callbacks: fit runs them
        (plain, {"matrix_key": None}),  # no cached matrix to train on
        (plain, {"matrix_key": key, "fit_params": weights}),
        (plain, {"matrix_key": ("in-place-run", "never built")}),
    ):
        first = train_param(state, X, Y, 2, param="n_estimators", matrix_key=key)
        before = matrix_stats()["in_place"]
        step = train_param(
            first.estimator, X, Y, 4, 2, param="n_estimators", consume=True, **kwargs
        )
        assert matrix_stats()["in_place"] == before
        assert step.estimator is not first.estimator and (step.continued, step.work) == (True, 2)
        assert first.estimator.get_booster().num_boosted_rounds() == 2  # the state kept


def _xgb_rung_context(run: str, **params: Any) -> tuple[Any, Any]:
    """A worker's context for rung steps of a 3-fold xgboost search of X, Y; and the data
    (``params``: more parameters of the model, and ``fit_params`` of the search)."""
    xgboost = pytest.importorskip("xgboost")
    from sklearn.metrics import check_scoring
    from sklearn.model_selection import StratifiedKFold

    from dmlsearch._evaluate import EvalContext, SearchData
    from dmlsearch._rungs import RungContext

    fit_params = params.pop("fit_params", {})
    params = {"max_depth": 3, "tree_method": "hist", "random_state": 0, "n_jobs": 1, **params}
    base = xgboost.XGBClassifier(**params)
    evaluation = EvalContext(
        estimator=base, scorer=check_scoring(base), multimetric=False,
        splits=list(StratifiedKFold(3).split(X, Y)), error_score=np.nan,
        return_train_score=True, trial_timeout=None,
    )  # fmt: skip
    context = RungContext(evaluation, "n_estimators", run, 0, np.unique(Y))
    return context, SearchData(X, Y, fit_params)


def test_a_worker_continues_xgboost_rung_steps_in_place_as_one_fit() -> None:
    from dmlsearch._rungs import RungSpec, drop_states, run_rung_step
    from dmlsearch._xgb_matrices import matrix_stats

    context, data = _xgb_rung_context("rung-in-place")
    params = {"learning_rate": 0.3}
    before = matrix_stats()["in_place"]
    for rung, (start, resource) in enumerate(((0, 1), (1, 3), (3, 9))):
        step = run_rung_step(data, context, RungSpec(0, params, 0, rung, resource, start), "w")
        assert step.continued == (start > 0) and step.stored
    assert matrix_stats()["in_place"] - before == 6  # two promotions x three folds
    at_once = run_rung_step(data, context, RungSpec(1, params, 0, 0, 9), "w")
    assert (step.test_scores, step.train_scores) == (at_once.test_scores, at_once.train_scores)
    # The cache of worker "w" (this process) holds both trials: leave nothing behind.
    assert drop_states("rung-in-place", dask_worker=SimpleNamespace(address="w")) == 2


def test_xgboost_from_an_unfitted_state_refits() -> None:
    step = train_param(_xgb(), X, Y, 5, previous=2, param="n_estimators")
    assert (step.continued, step.work) == (False, 5)
    assert step.estimator.get_booster().num_boosted_rounds() == 5


#: Validation rows of another problem: a model stopping early on them stops within a few
#: rounds, where boosting on from its booster would add rounds past the stop.
X_EVAL, Y_EVAL = make_classification(n_samples=120, n_features=8, n_informative=5, random_state=1)
STOPS_EARLY = {"early_stopping_rounds": 1, "learning_rate": 1.0, "max_depth": 5}


@pytest.mark.parametrize("case", ["classifier", "regressor", "pipeline", "callback"])
def test_xgboost_that_stops_early_refits_to_the_model_of_its_rounds(case: str) -> None:
    # Found by a probe: boosted on from a booster that had stopped at round 2, the
    # "6-round" model held 4 rounds, another model than 6 rounds at once (which stop at 2).
    # "callback": xgboost's EarlyStopping callback instead of early_stopping_rounds.
    xgboost = pytest.importorskip("xgboost")
    kind = xgboost.XGBRegressor if case == "regressor" else xgboost.XGBClassifier
    stops: dict[str, Any] = dict(STOPS_EARLY)
    if case == "callback":
        stops["callbacks"] = [
            xgboost.callback.EarlyStopping(rounds=stops.pop("early_stopping_rounds"))
        ]
    model = kind(tree_method="hist", random_state=0, n_jobs=1, **stops)
    param, fit = "n_estimators", {"eval_set": [(X_EVAL, Y_EVAL)], "verbose": False}
    if case == "pipeline":
        model, param = make_pipeline(StandardScaler(), model), "xgbclassifier__n_estimators"
        fit = {f"xgbclassifier__{name}": value for name, value in fit.items()}

    def booster(fitted: Any) -> Any:
        return (fitted[-1] if case == "pipeline" else fitted).get_booster()

    first = train_param(model, X, Y, 2, param=param, fit_params=fit)
    before = booster(first.estimator).save_raw()
    step = train_param(first.estimator, X, Y, 6, 2, param=param, fit_params=fit)
    once = train_param(model, X, Y, 6, param=param, fit_params=fit)
    assert (step.continued, step.work) == (False, 6) == (once.continued, once.work)
    assert step.estimator is not first.estimator and step.estimator.get_params()[param] == 6
    rounds = [booster(m).num_boosted_rounds() for m in (step.estimator, once.estimator)]
    assert rounds[0] == rounds[1] < 6  # it stopped there, with no rounds past the stop
    assert booster(first.estimator).save_raw() == before  # the state is not changed
    predict = "predict" if case == "regressor" else "predict_proba"
    got, want = (getattr(m, predict)(X) for m in (step.estimator, once.estimator))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_worker_refits_xgboost_rung_steps_that_stop_early() -> None:
    from dmlsearch._rungs import RungSpec, drop_states, run_rung_step

    fit = {"eval_set": [(X_EVAL, Y_EVAL)], "verbose": False}
    context, data = _xgb_rung_context("rung-stops-early", **STOPS_EARLY, fit_params=fit)
    params = {"reg_lambda": 2.0}
    for rung, (start, resource) in enumerate(((0, 1), (1, 3), (3, 9))):
        step = run_rung_step(data, context, RungSpec(0, params, 0, rung, resource, start), "w")
        assert not step.continued and step.work == resource
    at_once = run_rung_step(data, context, RungSpec(1, params, 0, 0, 9), "w")
    assert (step.test_scores, step.train_scores) == (at_once.test_scores, at_once.train_scores)
    assert drop_states("rung-stops-early", dask_worker=SimpleNamespace(address="w")) == 2


def _asha_counts_each_unit_once(estimator: Any, space: Any, **search: Any) -> tuple[Any, int]:
    """Run ``SearchCV(scheduler="asha", ...)`` on ``X, Y`` and check no rung refits from zero.

    On a 2-worker cluster without work stealing (a promotion runs where its state is, so
    the counts are exact). Returns the search and the sum over trials of the highest
    resource each reached, which the work done across rungs must equal.
    """
    import dask
    from distributed import Client

    from dmlsearch import SearchCV
    from dmlsearch.testing import local_cluster

    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        cluster = local_cluster(2)
    with cluster, Client(cluster, set_as_default=False) as client:
        fitted = SearchCV(
            estimator,
            space,
            scheduler="asha",
            n_trials=9,
            random_state=0,
            client=client,
            progress=False,
            dashboard=False,
            **search,
        ).fit(X, Y)
    r = fitted.cv_results_
    highest: dict[int, int] = {}
    for trial, resource in zip(r["trial"], r["n_resources"], strict=True):
        highest[int(trial)] = max(highest.get(int(trial), 0), int(resource))
    first = search["min_resource"]
    assert (r["n_resources"] > first).any()
    assert float(np.sum(r["work"])) == sum(highest.values())  # no refit from zero
    assert r["continued"][r["n_resources"] > first].all()
    return fitted, sum(highest.values())


@pytest.mark.cluster
def test_search_cv_asha_on_xgboost_rounds_trains_each_round_once() -> None:
    from dmlsearch import Float

    xgboost = pytest.importorskip("xgboost")
    search, _ = _asha_counts_each_unit_once(
        xgboost.XGBClassifier(max_depth=2, tree_method="hist", random_state=0, n_jobs=1),
        {"learning_rate": Float(0.05, 0.5, log=True)},
        resource="n_estimators",
        min_resource=2,
        max_resource=18,
        cv=3,
    )
    assert search.best_estimator_.get_booster().num_boosted_rounds() == search.best_resource_


# ---------------------------------------------------------------- torch epochs (skorch nets)


def _torch_net(**kwargs: Any) -> Any:
    """A TorchClassifier of a tiny MLP whose every epoch appends to ``EPOCHS``."""
    pytest.importorskip("skorch")
    import torch
    from skorch.callbacks import Callback

    from dmlsearch.training import TorchClassifier

    class CountEpochs(Callback):  # type: ignore[misc]
        def on_epoch_end(self, net: Any, **_: Any) -> None:
            EPOCHS.append(1)

    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    params = {"lr": 0.05, "batch_size": 32, "random_state": 0, "callbacks": [CountEpochs()]}
    return TorchClassifier(module, **{**params, **kwargs})


#: Epochs trained by every _torch_net in this process, all instances together.
EPOCHS: list[int] = []


def _weights(net: Any) -> list[Any]:
    return list(net.module_.state_dict().values())


def test_torch_epochs_continue_on_the_trained_module_and_count_each_epoch_once() -> None:
    import torch

    net = _torch_net()
    assert check_resource("max_epochs", net) == "max_epochs"
    EPOCHS.clear()
    steps = [train_param(net, X, Y, 1, param="max_epochs")]
    for low, high in ((1, 3), (3, 9)):
        steps.append(train_param(steps[-1].estimator, X, Y, high, low, param="max_epochs"))
    assert [(s.continued, s.work) for s in steps] == [(False, 1), (True, 2), (True, 6)]
    # The work across rungs is the work of the highest rung: 9 epochs, not 1 + 3 + 9.
    assert len(EPOCHS) == 9 == sum(s.work for s in steps)
    model = steps[-1].estimator
    assert len(model.history) == 9
    # The model says what it holds; warm_start is the user's again.
    assert model.max_epochs == 9 and model.warm_start is False
    # Same module as 9 epochs at once (random_state fixes every epoch's shuffling).
    once = train_param(net, X, Y, 9, param="max_epochs").estimator
    assert all(torch.equal(a, b) for a, b in zip(_weights(model), _weights(once), strict=True))
    # The states it continued from are untouched.
    assert [len(s.estimator.history) for s in steps] == [1, 3, 9]


def test_torch_epochs_continue_inside_a_pipeline() -> None:
    pipe = make_pipeline(StandardScaler(), _torch_net())
    param = "torchclassifier__max_epochs"
    first = train_param(pipe, X, Y, 2, param=param)
    EPOCHS.clear()
    step = train_param(first.estimator, X, Y, 5, 2, param=param)
    assert (step.continued, step.work, len(EPOCHS)) == (True, 3, 3)
    assert len(step.estimator[-1].history) == 5
    same = train_param(step.estimator, X, Y, 5, 5, param=param)
    assert (same.continued, same.work) == (True, 0)


def test_torch_epochs_from_an_unfitted_state_train_from_scratch() -> None:
    EPOCHS.clear()
    step = train_param(_torch_net(), X, Y, 4, 2, param="max_epochs")
    assert (step.continued, step.work, len(EPOCHS)) == (False, 4, 4)


@pytest.mark.cluster
def test_search_cv_asha_on_torch_epochs_trains_each_epoch_once(tmp_path: Any) -> None:
    pytest.importorskip("skorch")
    from skorch.callbacks import Callback

    from dmlsearch import Float

    log = str(tmp_path / "epochs.log")

    class EpochLog(Callback):  # type: ignore[misc]
        """Appends a line per epoch to a file: counts epochs in every worker process."""

        def __init__(self, path: str) -> None:
            self.path = path

        def on_epoch_end(self, net: Any, **_: Any) -> None:
            with open(self.path, "a") as fh:
                fh.write("1\n")

    search, highest = _asha_counts_each_unit_once(
        _torch_net(callbacks=[EpochLog(log)], batch_size=64),
        {"lr": Float(1e-3, 0.3, log=True)},
        resource="max_epochs",
        min_resource=1,
        max_resource=9,
        cv=2,
    )
    # Counted by the nets themselves: each fold's epochs once, plus the refit of the best.
    with open(log) as fh:
        epochs = len(fh.readlines())
    assert epochs == 2 * highest + search.best_resource_
    assert len(search.best_estimator_.history) == search.best_resource_


def test_xgboost_rung_steps_copy_each_folds_rows_once_and_read_only() -> None:
    from dmlsearch import _xgb_matrices
    from dmlsearch._rungs import RungSpec, drop_states, run_rung_step

    context, data = _xgb_rung_context("rows-run")
    before = _xgb_matrices.matrix_stats()["rows_reused"]
    steps = [
        run_rung_step(data, context, RungSpec(t, {"learning_rate": r}, 0, 0, 3), "w")
        for t, r in enumerate((0.1, 0.3))
    ]
    steps.append(run_rung_step(data, context, RungSpec(0, {"learning_rate": 0.1}, 0, 1, 6, 3), "w"))
    # Three folds split once; the other two steps took every fold's rows from the cache.
    assert _xgb_matrices.matrix_stats()["rows_reused"] - before == 6
    held = [rows for key, (_, rows) in _xgb_matrices._rows.items() if key[0] == "rows-run"]
    assert len(held) == 3 and not any(part.flags.writeable for rows in held for part in rows)
    # The same scores as steps that split the rows anew (another run's key, cache off).
    alone, _ = _xgb_rung_context("rows-run-2")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_xgb_matrices, "_rows_budget", lambda: 0)  # nothing fits
        again = run_rung_step(data, alone, RungSpec(1, {"learning_rate": 0.3}, 0, 0, 3), "w")
    assert not any(key[0] == "rows-run-2" for key in _xgb_matrices._rows)
    assert (again.test_scores, again.train_scores) == (steps[1].test_scores, steps[1].train_scores)
    # The run's end drops its states, matrices and rows.
    worker = SimpleNamespace(address="w")
    drop_states("rows-run", dask_worker=worker)
    drop_states("rows-run-2", dask_worker=worker)
    assert not any(key[0].startswith("rows-run") for key in _xgb_matrices._rows)
    assert not any(key[0][0].startswith("rows-run") for key in _xgb_matrices._matrices)


def test_fold_rows_are_cached_only_for_bare_xgboost_models() -> None:
    xgboost = pytest.importorskip("xgboost")
    from sklearn.linear_model import SGDClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from dmlsearch._xgb_matrices import fold_rows_key

    def key(estimator: Any, resource: str) -> Any:
        return fold_rows_key(resource, estimator, ("run", 2))

    xgb = xgboost.XGBClassifier()
    assert key(xgb, "n_estimators") == ("run", 2)
    assert key(xgb, "n_samples") == ("run", 2)
    # A Pipeline's transformers may write into their input (copy=False); a forest refits.
    pipe = make_pipeline(StandardScaler(copy=False), xgboost.XGBClassifier())
    assert key(pipe, "xgbclassifier__n_estimators") is None
    assert key(xgboost.XGBRFClassifier(), "n_estimators") is None
    assert key(SGDClassifier(), "partial_fit") is None


def test_only_arrays_that_can_be_made_read_only_are_cached() -> None:
    import pandas as pd
    import scipy.sparse as sparse

    from dmlsearch import _xgb_matrices

    calls: list[str] = []

    def make(kind: str) -> Any:
        def rows() -> tuple[Any, ...]:
            calls.append(kind)
            if kind == "frame":
                return pd.DataFrame(X[:10]), Y[:10]
            if kind == "csr":
                return sparse.csr_matrix(X[:10]), Y[:10]
            return X[:10].copy(), Y[:10].copy()

        return rows

    try:
        for kind in ("array", "csr", "frame"):
            first = _xgb_matrices.cached_fold_rows(("ro-run", kind), make(kind))
            again = _xgb_matrices.cached_fold_rows(("ro-run", kind), make(kind))
            if kind == "frame":  # a pandas frame cannot be protected: made anew each time
                assert calls.count(kind) == 2 and again[0] is not first[0]
                continue
            assert calls.count(kind) == 1 and again[0] is first[0]
            parts = [first[0]] if kind == "array" else [first[0].data, first[0].indices]
            for part in [*parts, first[1]]:
                with pytest.raises(ValueError, match="read-only"):
                    part[0] = 0
    finally:
        _xgb_matrices.drop_run("ro-run")


def test_failed_and_unscored_steps_rank_after_every_scored_row() -> None:
    from dmlsearch._results import rank_by_resource

    levels = np.array([0, 0, 1, 1, 2])
    means = np.array([0.5, 0.7, 0.6, np.nan, 0.0])
    failed = np.array([False, False, False, False, True])  # scored error_score=0.0
    # The best is the top scored row of the highest level reached by a completed step.
    assert rank_by_resource(levels, means, failed).tolist() == [3, 2, 1, 5, 4]
    assert rank_by_resource(levels, means).tolist() == [4, 3, 2, 5, 1]


def test_a_resource_refusal_suggests_only_what_the_estimator_takes() -> None:
    # It suggested 'partial_fit' to estimators without one.
    from sklearn.neighbors import KNeighborsClassifier

    with pytest.raises(InvalidParameterError, match=r"\(or use one of \['n_samples'\]\)"):
        check_resource("max_iter", KNeighborsClassifier())
    with pytest.raises(InvalidParameterError, match=r"one of \['max_iter', 'n_samples'\]"):
        check_resource("max_iterr", LogisticRegression())
    with pytest.raises(InvalidParameterError, match=r"\['partial_fit', 'max_iter', 'n_samples'\]"):
        check_resource("n_iter", SGDClassifier())
