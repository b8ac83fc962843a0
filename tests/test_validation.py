"""Driver-side checks of candidate parameter names (dmlsearch._validation)."""

from __future__ import annotations

import pytest
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from dmlsearch import Categorical, Float, InvalidParameterError, as_space
from dmlsearch._validation import check_candidate, check_space_names


def pipeline() -> Pipeline:
    return Pipeline([("scale", StandardScaler()), ("clf", LogisticRegression())])


@pytest.mark.parametrize(
    "params",
    [
        {"C": 1.0, "penalty": "l2"},
        {"clf__C": 1.0, "scale__with_mean": False},
        {"clf": GaussianNB(), "clf__var_smoothing": 1e-9},
        {"clf": "passthrough", "scale": StandardScaler(with_std=False)},
        {"scale": Pipeline([("inner", StandardScaler())]), "scale__inner__with_mean": True},
        {"steps": [("nb", GaussianNB())], "nb__var_smoothing": 1e-9},
    ],
)
def test_valid_names_pass(params):
    estimator = LogisticRegression() if "C" in params else pipeline()
    check_candidate(estimator, params, {})


@pytest.mark.parametrize(
    ("estimator", "params", "match"),
    [
        (
            LogisticRegression(),
            {"no_such_param": 1},
            "'no_such_param' is not a parameter of LogisticRegression",
        ),
        (LogisticRegression(), {"tool": 1e-3}, "did you mean 'tol'"),
        (pipeline(), {"clf__Cc": 1.0}, "did you mean 'clf__C'"),
        (pipeline(), {"clff__C": 1.0}, "no step or parameter 'clff'; did you mean 'clf'"),
        (
            pipeline(),
            {"clf": GaussianNB(), "clf__C": 1.0},
            r"'clf__C' is not .* when clf=GaussianNB\(\)",
        ),
        (pipeline(), {"clf": "passthrough", "clf__C": 1.0}, "'clf__C' is not a parameter"),
    ],
)
def test_unknown_names_are_refused_with_a_hint(estimator, params, match):
    with pytest.raises(InvalidParameterError, match=match) as info:
        check_candidate(estimator, params, {})
    assert info.value.param == "search_space"
    assert isinstance(info.value, ValueError)


class CountingPipeline(Pipeline):
    calls = 0

    def get_params(self, deep=True):
        type(self).calls += 1
        return super().get_params(deep=deep)


def test_cache_by_shape_checks_each_shape_once():
    estimator = CountingPipeline([("scale", StandardScaler()), ("clf", LogisticRegression())])
    cache: dict = {}
    for c in (0.1, 1.0, 10.0):
        check_candidate(estimator, {"clf": GaussianNB(), "clf__var_smoothing": c}, cache)
        check_candidate(estimator, {"clf": LogisticRegression(), "clf__C": c}, cache)
    assert CountingPipeline.calls == 2 and len(cache) == 2
    # A refused shape is remembered as refused (set_params was tried on a clone once).
    with pytest.raises(InvalidParameterError):
        check_candidate(estimator, {"clf": GaussianNB(), "clf__C": 1.0}, cache)
    calls = CountingPipeline.calls
    with pytest.raises(InvalidParameterError):
        check_candidate(estimator, {"clf": GaussianNB(), "clf__C": 2.0}, cache)
    assert CountingPipeline.calls == calls


def test_space_names_cover_every_estimator_choice_and_subspace():
    good = as_space(
        [
            {"clf": Categorical([LogisticRegression(max_iter=50)]), "clf__C": Float(0.1, 1.0)},
            {"clf": [GaussianNB(), "passthrough"], "scale__with_mean": [True, False]},
        ]
    )
    check_space_names(pipeline(), good)
    bad = as_space({"clf": [LogisticRegression(), GaussianNB()], "clf__C": Float(0.1, 1.0)})
    with pytest.raises(InvalidParameterError, match=r"when clf=GaussianNB\(\)"):
        check_space_names(pipeline(), bad)


def test_non_sklearn_estimators_and_meta_estimators():
    class Bare:
        def fit(self, X, y):
            return self

    check_candidate(Bare(), {"anything": 1}, {})  # no get_params: nothing to check against
    ct = ColumnTransformer([("num", StandardScaler(), [0])])
    check_candidate(ct, {"num__with_mean": False, "num": StandardScaler(with_std=False)}, {})
    with pytest.raises(InvalidParameterError, match="num__with_mean"):
        check_candidate(ct, {"num__with_mean": False, "num": GaussianNB()}, {})


def test_names_that_set_params_takes_but_get_params_omits_are_accepted():
    xgboost = pytest.importorskip("xgboost")
    skorch = pytest.importorskip("skorch")
    torch = pytest.importorskip("torch")
    # xgboost's **kwargs (booster aliases) and skorch's module__*/optimizer__* are listed by
    # get_params only once set; GridSearchCV searches them through set_params.
    check_space_names(xgboost.XGBClassifier(), as_space({"eta": [0.1], "n_estimators": [5]}))
    xgb_pipe = Pipeline([("scale", StandardScaler()), ("clf", xgboost.XGBClassifier())])
    check_space_names(xgb_pipe, as_space({"clf__eta": Float(0.01, 0.5)}))
    net = skorch.NeuralNetClassifier(torch.nn.Linear, optimizer=torch.optim.SGD)
    space = as_space({"module__in_features": [4, 8], "optimizer__momentum": Float(0.0, 0.9)})
    check_space_names(net, space)
    cache: dict = {}
    check_candidate(net, {"module__in_features": 4, "optimizer__momentum": 0.5}, cache)
    assert list(cache.values()) == [None]
    assert not hasattr(net, "module__in_features")  # checked on a clone
    # set_params refuses these: still refused, with the hint.
    with pytest.raises(InvalidParameterError, match="did you mean 'max_epochs'"):
        check_space_names(net, as_space({"max_epoch": [1, 2]}))
    swapped = {"clf": GaussianNB(), "clf__eta": 0.1}
    with pytest.raises(InvalidParameterError, match=r"when clf=GaussianNB\(\)"):
        check_candidate(xgb_pipe, swapped, {})
    assert swapped["clf"].get_params() == GaussianNB().get_params()
