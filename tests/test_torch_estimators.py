"""TorchClassifier / TorchRegressor: the estimator contract, inputs, seeds, errors, SearchCV."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import Any

import cloudpickle
import numpy as np
import pytest
import torch
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.metrics import f1_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from skorch.callbacks import EpochScoring
from skorch.dataset import Dataset as SkorchDataset
from skorch.dataset import ValidSplit

from dmlsearch import Categorical, Float, Int, Registry, SearchCV
from dmlsearch.ensemble import EnsembleSelection
from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.training import TorchClassifier, TorchRegressor

# The module classes below reach the workers by value, as a notebook's or script's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

N, D = 240, 4


class MLP(torch.nn.Module):
    """A tiny MLP; ``n_out`` logits (classifier) or outputs (regressor)."""

    def __init__(self, n_in: int = D, hidden: int = 8, n_out: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, n_out)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D))  # float64, as scikit-learn users have it
    return X, (X[:, 0] + X[:, 1] > 0).astype(np.int64)


def weights(net: Any) -> list[torch.Tensor]:
    return [t.detach().clone() for t in net.module_.state_dict().values()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_import_dmlsearch_imports_neither_torch_nor_skorch() -> None:
    code = (
        "import sys, dmlsearch, dmlsearch.training\n"
        "assert 'skorch' not in sys.modules, 'dmlsearch.training imported skorch'\n"
        "from dmlsearch.training import TorchClassifier\n"
        "assert 'skorch' in sys.modules\n"
    )
    plain = "import sys, dmlsearch\nassert 'torch' not in sys.modules\n"
    for script in (plain, code):
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_clone_and_params_round_trip() -> None:
    net = TorchClassifier(MLP, module__hidden=5, lr=0.05, max_epochs=2, random_state=3)
    twin = clone(net)
    assert type(twin) is TorchClassifier
    assert twin.get_params(deep=False) == net.get_params(deep=False)
    params = net.get_params()
    # The search-friendly defaults, and the module's/optimizer's own arguments by name.
    assert params["train_split"] is None and params["verbose"] == 0
    assert params["iterator_train__shuffle"] is True
    assert params["criterion"] is torch.nn.CrossEntropyLoss
    assert params["module__hidden"] == 5 and params["module__n_out"] == 2
    assert params["optimizer__weight_decay"] == 0
    twin.set_params(module__hidden=7, lr=0.1, optimizer__weight_decay=1e-4)
    assert (twin.module__hidden, twin.lr, twin.optimizer__weight_decay) == (7, 0.1, 1e-4)
    assert is_classifier(net) and is_regressor(TorchRegressor(MLP))


def test_a_pipeline_sets_module_arguments_it_was_not_given() -> None:
    # Pipeline.set_params accepts only names its steps' get_params lists.
    pipe = make_pipeline(StandardScaler(), TorchClassifier(MLP))
    pipe.set_params(torchclassifier__module__hidden=9, torchclassifier__optimizer__eps=1e-6)
    assert (pipe[-1].module__hidden, pipe[-1].optimizer__eps) == (9, 1e-6)


def test_classifier_takes_any_labels_and_float64(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = data
    labels = np.array(["no", "yes"])[y]
    net = TorchClassifier(MLP, module__hidden=8, lr=0.05, max_epochs=20, random_state=0)
    net.fit(X, labels)
    assert list(net.classes_) == ["no", "yes"]
    predicted = net.predict(X)
    assert set(predicted) <= {"no", "yes"}
    proba = net.predict_proba(X)
    assert proba.shape == (N, 2) and np.allclose(proba.sum(axis=1), 1, atol=1e-5)
    assert net.score(X, labels) > 0.9  # a linear boundary: an MLP learns it
    assert len(net.history) == 20


def test_classes_given_in_any_order_train_the_labels_and_sort_as_scikit_learn(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    # Probe: classes=[7, 3, 9] (as pandas' unique() gives them) trained two labels as one
    # class index, silently (train accuracy 0.23 against 0.99).
    X, _ = data
    y = np.array([3, 7, 9])[(X[:, 0] > 0).astype(int) + (X[:, 1] > 0).astype(int)]
    kwargs: dict[str, Any] = {"module__n_out": 3, "lr": 0.05, "max_epochs": 20}
    net = TorchClassifier(MLP, **kwargs, random_state=0)
    expected = net.fit(X, y).predict_proba(X)
    for order in ([7, 3, 9], [9, 7, 3], [9, 3, 7, 3]):
        shuffled = TorchClassifier(MLP, **kwargs, classes=order, random_state=0).fit(X, y)
        assert list(shuffled.classes_) == [3, 7, 9]
        np.testing.assert_allclose(shuffled.predict_proba(X), expected, rtol=1e-5, atol=1e-6)
        assert shuffled.score(X, y) > 0.9


def test_predict_and_score_before_fit_raise_not_fitted(data: tuple[np.ndarray, np.ndarray]) -> None:
    from sklearn.exceptions import NotFittedError

    X, y = data
    for method in ("predict", "predict_proba", "score"):
        args = (X, y) if method == "score" else (X,)
        with pytest.raises(NotFittedError):
            getattr(TorchClassifier(MLP), method)(*args)


def test_a_numpy_integer_batch_size_trains(data: tuple[np.ndarray, np.ndarray]) -> None:
    # As a search space's array draws it; torch's DataLoader refused it ("should be a
    # positive integer value, but got batch_size=16"), failing every trial.
    X, y = data
    for cls, target in ((TorchClassifier, y), (TorchRegressor, X[:, :1])):
        kwargs: dict[str, Any] = {"module__n_out": 1} if cls is TorchRegressor else {}
        net = cls(MLP, **kwargs, batch_size=np.int64(16), max_epochs=1, random_state=0)
        net.fit(X, target)
        assert net.history[-1]["train_batch_count"] == N // 16


@pytest.mark.parametrize("names", [["no", "yes"], [3, 7]])
def test_validation_scores_compare_labels_with_labels(
    data: tuple[np.ndarray, np.ndarray], names: list[Any]
) -> None:
    # y trains as class indices but predict gives labels: the default valid_acc and a
    # user's EpochScoring must compare labels (strings failed; 3/7 scored 0 against 0/1).
    X, y = data
    labels = np.array(names)[y]
    split = ValidSplit(4, stratified=True)
    net = TorchClassifier(
        MLP, lr=0.05, max_epochs=3, random_state=0, train_split=split,
        callbacks=[EpochScoring("f1_macro", lower_is_better=False)],
    ).fit(X, labels)  # fmt: skip
    _, valid = split(SkorchDataset(X, y), y)
    rows = np.asarray(valid.indices)
    predicted = net.predict(X[rows])
    assert net.history[-1, "valid_acc"] == pytest.approx(np.mean(predicted == labels[rows]))
    assert net.history[-1, "f1_macro"] == pytest.approx(
        f1_score(labels[rows], predicted, average="macro")
    )
    assert net.history[-1, "valid_acc"] > 0.6


def test_a_refused_continued_fit_leaves_the_net_as_it_was(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    X, _ = data
    target = X @ np.arange(1.0, D + 1)
    net = TorchRegressor(MLP, module__n_out=1, max_epochs=2, random_state=0).fit(X, target)
    before = net.predict(X[:3])
    assert before.shape == (3,)
    with pytest.raises(InvalidParameterError, match="module"):
        net.set_params(warm_start=True).fit(X, np.c_[target, target])  # 2 columns, 1 output
    np.testing.assert_array_equal(net.predict(X[:3]), before)


def test_a_module_rebuilt_by_set_params_is_seeded(data: tuple[np.ndarray, np.ndarray]) -> None:
    # skorch rebuilds the module alone when a module__ argument of a fitted net changes.
    X, y = data
    rebuilt = []
    for _ in range(2):
        net = TorchClassifier(MLP, max_epochs=1, random_state=0).fit(X, y)
        net.set_params(module__hidden=5)
        rebuilt.append(net.module_.state_dict())
    fresh = TorchClassifier(MLP, module__hidden=5, max_epochs=1, random_state=0).initialize()
    for name, value in fresh.module_.state_dict().items():
        assert torch.equal(rebuilt[0][name], value) and torch.equal(rebuilt[1][name], value)


def test_regressor_takes_a_1d_target(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, _ = data
    y = 2 * X[:, 0] - X[:, 2]
    net = TorchRegressor(MLP, module__n_out=1, module__hidden=16, lr=0.05, max_epochs=30)
    net.set_params(random_state=0).fit(X, y)
    predicted = net.predict(X)
    assert predicted.shape == (N,)
    assert net.score(X, y) > 0.8


def test_a_random_state_fixes_the_model_and_continuing_equals_training_at_once(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    X, y = data
    net = TorchClassifier(MLP, lr=0.05, batch_size=16, random_state=4)
    straight = clone(net).set_params(max_epochs=5).fit(X, y)
    again = clone(net).set_params(max_epochs=5).fit(X, y)
    assert same(weights(straight), weights(again))
    # 2 epochs, then 3 more on the same module (warm_start): the model of 5 at once.
    warm = clone(net).set_params(max_epochs=2).fit(X, y)
    warm.set_params(warm_start=True, max_epochs=3).fit(X, y)
    assert len(warm.history) == 5
    assert same(weights(straight), weights(warm))
    # partial_fit continues too (max_epochs epochs per call).
    partial = clone(net).set_params(max_epochs=1)
    for _ in range(5):
        partial.partial_fit(X, y)
    assert same(weights(straight), weights(partial))
    other = clone(net).set_params(max_epochs=5, random_state=5).fit(X, y)
    assert not same(weights(straight), weights(other))


def test_the_global_torch_generator_is_left_as_it_was(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = data
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    TorchClassifier(MLP, max_epochs=2, random_state=0).fit(X, y)
    assert torch.equal(torch.rand(3), expected)


def test_pickle_keeps_the_fitted_model(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = data
    net = TorchClassifier(MLP, lr=0.05, max_epochs=3, random_state=0).fit(X, y)
    for dumps in (pickle.dumps, cloudpickle.dumps):
        back = pickle.loads(dumps(net))
        assert np.array_equal(back.predict_proba(X), net.predict_proba(X))
        assert len(back.history) == 3


def test_partial_fit_takes_the_classes_on_its_first_call(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    X, y = data
    net = TorchClassifier(MLP, module__n_out=3, max_epochs=1, random_state=0)
    net.partial_fit(X[y == 0], y[y == 0], classes=[0, 1, 2])
    net.partial_fit(X[y == 1], y[y == 1])
    assert list(net.classes_) == [0, 1, 2] and len(net.history) == 2
    with pytest.raises(InvalidParameterError, match=r"labels \[7\]"):
        net.partial_fit(X[:4], np.full(4, 7))


@pytest.mark.parametrize(
    ("params", "param", "words"),
    [
        ({"module": "MLP"}, "module", "torch.nn.Module class"),
        ({"module": MLP, "module__hiden": 3}, "module", "unexpected keyword argument 'hiden'"),
        ({"module": MLP, "max_epochs": 0}, "max_epochs", "int >= 1"),
        ({"module": MLP, "batch_size": 0}, "batch_size", "-1"),
        ({"module": MLP, "lr": -0.1}, "lr", "> 0"),
        ({"module": MLP, "random_state": "seed"}, "random_state", "RandomState"),
        ({"module": MLP, "optimizer": "adam"}, "optimizer", "torch.optim.Optimizer"),
    ],
)
def test_bad_input_is_refused_before_training(
    data: tuple[np.ndarray, np.ndarray], params: dict[str, Any], param: str, words: str
) -> None:
    X, y = data
    net = TorchClassifier(**params)
    with pytest.raises(InvalidParameterError, match=words) as info:
        net.fit(X, y)
    assert info.value.param == param
    assert not net.initialized_ and not hasattr(net, "module_")


class WithAux(MLP):
    """Logits, and in training mode an auxiliary head's too (as Inception's): the batches
    train on a tuple that the default criterion cannot take."""

    def forward(self, x: torch.Tensor) -> Any:
        out = self.layers(x)
        return (out, out.detach()) if self.training else out


class Normed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.linear = torch.nn.BatchNorm1d(D), torch.nn.Linear(D, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(x))


def test_the_first_rows_run_as_training_runs_them_and_change_nothing(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    X, y = data
    # In eval mode the check saw one tensor and passed; the first batch then failed with
    # the criterion's TypeError on the tuple.
    with pytest.raises(InvalidParameterError, match="criterion fails on the module's output"):
        TorchClassifier(WithAux, max_epochs=1, random_state=0).fit(X, y)
    # The check runs on a copy: BatchNorm's statistics are those of the epochs alone.
    net = TorchClassifier(Normed(), max_epochs=1, batch_size=len(X), random_state=0)
    net.fit(X * 3 + 5, y)
    norm = net.module_.norm
    assert int(norm.num_batches_tracked) == 1
    expected = 0.9 * torch.zeros(D) + 0.1 * torch.as_tensor((X * 3 + 5).mean(axis=0))
    torch.testing.assert_close(norm.running_mean, expected.float(), rtol=1e-5, atol=1e-5)


def test_a_module_instance_is_taken_as_it_is(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = data
    module = MLP(hidden=6)
    net = TorchClassifier(module, max_epochs=1, random_state=0).fit(X, y)
    assert net.module_ is module


@pytest.mark.cluster
def test_search_cv_tunes_module_and_training_parameters_on_workers(
    client: Any, data: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    X, y = data
    registry = Registry(f"sqlite:///{tmp_path / 'r.db'}")
    search = SearchCV(
        TorchClassifier(MLP, random_state=0),
        {
            "module__hidden": Int(4, 16),
            "lr": Float(1e-3, 1e-1, log=True),
            "max_epochs": Int(1, 3),
            "batch_size": Categorical([16, 32]),
        },
        n_trials=4,
        cv=2,
        random_state=0,
        client=client,
        progress=False,
        dashboard=False,
        registry=registry,
        experiment_name="nets",
        keep_oof=True,
    ).fit(X, y)
    assert all(t.state == "complete" for t in search.trials_)
    workers = set(client.scheduler_info()["workers"])
    assert {t.worker for t in search.trials_} <= workers  # each trial on a worker process
    best = search.best_estimator_
    assert isinstance(best, TorchClassifier)
    assert best.module_.layers[0].out_features == search.best_params_["module__hidden"]
    assert len(best.history) == search.best_params_["max_epochs"]
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    # The best net is registered (weights and plain parameters, no pickle) and loads back.
    record = search.model_version_
    assert record.format == "skorch-net"
    loaded = registry.load_model(record.model, record.version, module=TorchClassifier(MLP))
    np.testing.assert_array_equal(loaded.predict(X), best.predict(X))
    np.testing.assert_allclose(loaded.predict_proba(X), best.predict_proba(X), rtol=1e-6)
    # An ensemble of the trials: from the fitted search; from the experiment's name, a clear
    # error (the registered net loads only into a net of its class, which the search holds).
    selection = EnsembleSelection(search, ensemble_size=3, n_init=2, client=client).fit(X, y)
    assert all(isinstance(m, TorchClassifier) for m in selection.estimators_)
    with pytest.raises(InvalidParameterError, match="pass the fitted SearchCV"):
        EnsembleSelection("nets", ensemble_size=3, n_init=2, registry=registry, client=client).fit(
            X, y
        )
    registry.close()


class TurnsNaN(torch.nn.CrossEntropyLoss):
    """Cross-entropy that turns NaN after ``after`` calls (None: never), as a loss does
    when training diverges; its NaN gradients make the weights NaN."""

    def __init__(self, after: int | None = None) -> None:
        super().__init__()
        self.after, self.calls = after, 0

    def forward(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        loss = super().forward(out, target)
        return loss * float("nan") if self.after is not None and self.calls > self.after else loss


def imbalanced() -> tuple[np.ndarray, np.ndarray]:
    """Rows whose label is mostly the first class: the label an argmax of NaN gives."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, D))
    return X, np.where(rng.random(N) < 0.85, "a", "b")


def test_a_net_with_nan_weights_refuses_to_predict_and_says_why() -> None:
    from dmlsearch.exceptions import NonFiniteOutputError

    X, y = imbalanced()
    net = TorchClassifier(MLP, criterion=TurnsNaN, criterion__after=2, max_epochs=2)
    with pytest.warns(RuntimeWarning, match="not finite"):
        net.fit(X, y)
    message = f"outputs are NaN or infinite for {N} of {N} rows: the training loss was not finite"
    for method in (net.predict, net.predict_proba, lambda X: net.score(X, y)):
        with pytest.raises(NonFiniteOutputError, match=message):
            method(X)
    regressor = TorchRegressor(MLP, module__n_out=1, criterion=torch.nn.MSELoss, max_epochs=1)
    regressor.fit(X, X[:, 0])
    assert np.isfinite(regressor.predict(X)).all()
    bad_rows = X.copy()
    bad_rows[:3, 0] = np.nan  # a healthy model, rows that are not: named as the cause
    with pytest.raises(NonFiniteOutputError, match="for 3 of 240 rows: those rows of X"):
        regressor.predict(bad_rows)


@pytest.mark.cluster
def test_a_trial_whose_weights_turned_nan_fails_instead_of_scoring_the_first_class(
    client: Any,
) -> None:
    # Without the check, argmax over NaN outputs predicts "a" for every row: accuracy 0.85,
    # better than the healthy trial's, so the diverged net was the best and was refitted.
    X, y = imbalanced()
    search = SearchCV(
        TorchClassifier(
            MLP, criterion=TurnsNaN, lr=1e-4, max_epochs=2, batch_size=32, random_state=0
        ),
        {"criterion__after": [3, None]},
        cv=2,
        client=client,
        progress=False,
        dashboard=False,
    ).fit(X, y)
    states = {t.params["criterion__after"]: t for t in search.trials_}
    assert states[3].state == "failed"
    assert "NonFiniteOutputError" in states[3].error and "not finite" in states[3].error
    assert states[None].state == "complete"
    assert search.best_params_ == {"criterion__after": None}


def test_a_registered_net_loads_only_into_a_net_of_its_class(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    from dmlsearch.registry import FormatError

    X, _ = data
    net = TorchRegressor(MLP, module__n_out=1, module__hidden=5, max_epochs=2, random_state=0)
    net.fit(X, X[:, 0])
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as registry:
        record = registry.register_model("reg", net)
        assert record.lineage["format_meta"]["params"]["module__hidden"] == 5
        loaded = registry.load_model("reg", module=TorchRegressor(MLP, module__n_out=1))
        assert loaded.module_.layers[0].out_features == 5  # stored parameters applied
        np.testing.assert_allclose(loaded.predict(X), net.predict(X), rtol=1e-6)
        with pytest.raises(FormatError, match="module="):
            registry.load_model("reg")
        with pytest.raises(FormatError, match="not a"):
            registry.load_model("reg", module=TorchClassifier(MLP))
        with pytest.raises(FormatError, match="not fitted"):
            registry.register_model("unfitted", TorchClassifier(MLP))


class ActMLP(torch.nn.Module):
    """An MLP whose activation is a class parameter (``module__act``)."""

    def __init__(self, act: Any = torch.nn.ReLU, hidden: int = 8) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(D, hidden), act(), torch.nn.Linear(hidden, 2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def test_loading_into_a_net_without_the_registered_classes_warns(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    # Probe: module__act=Tanh (not plain data, so not stored) loaded as ReLU with no word,
    # and predicted other probabilities.
    X, y = data
    net = TorchClassifier(ActMLP, module__act=torch.nn.Tanh, max_epochs=2, random_state=0)
    net.fit(X, y)
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as registry:
        registry.register_model("act", net)
        with pytest.warns(UserWarning, match=r"module__act was torch\.nn\..*:Tanh when registered"):
            wrong = registry.load_model("act", module=TorchClassifier(ActMLP))
        assert isinstance(wrong.module_.layers[1], torch.nn.ReLU)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            right = registry.load_model(
                "act", module=TorchClassifier(ActMLP, module__act=torch.nn.Tanh)
            )
        np.testing.assert_allclose(right.predict_proba(X), net.predict_proba(X), rtol=1e-6)


def test_a_pipeline_holding_a_net_is_refused_saying_why_and_pickles_when_asked(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    # Probe: the search's warning gave skops' internal error ("module 'skorch.net' has no
    # attribute '_virtual_setattr'") instead of the cause.
    from dmlsearch.registry import FormatError

    X, y = data
    pipe = make_pipeline(StandardScaler(), TorchClassifier(MLP, max_epochs=1, random_state=0))
    pipe.fit(X, y)
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as registry:
        with pytest.raises(FormatError, match=r"holds a torch net \(torchclassifier\)") as info:
            registry.register_model("pipe", pipe)
        assert "_virtual_setattr" not in str(info.value)
        registry.register_model("pipe", pipe, allow_pickle=True)
        loaded = registry.load_model("pipe", allow_pickle=True)
        np.testing.assert_allclose(loaded.predict_proba(X), pipe.predict_proba(X), rtol=1e-6)


def test_optimizer_and_criterion_arguments_are_checked_as_module_ones(
    data: tuple[np.ndarray, np.ndarray], client: Any
) -> None:
    # Probe: optimizer__momentm gave a bare TypeError at fit, and a search over it (or over
    # Adam's non-existent momentum) failed every trial instead of being refused first.
    X, y = data
    for kwargs, part in (
        ({"optimizer__momentm": 0.9}, "optimizer"),
        ({"criterion__reductio": "sum"}, "criterion"),
    ):
        with pytest.raises(InvalidParameterError, match="unexpected keyword") as info:
            TorchClassifier(MLP, max_epochs=1, **kwargs).fit(X, y)
        assert info.value.param == part
    with pytest.raises(InvalidParameterError, match="did you mean optimizer__momentum"):
        TorchClassifier(MLP, optimizer=torch.optim.SGD).set_params(optimizer__momentm=0.9)
    net = TorchClassifier(MLP, optimizer=torch.optim.SGD).set_params(optimizer__momentum=0.9)
    assert net.get_params()["optimizer__momentum"] == 0.9
    for space in ({"optimizer__momentum": [0.0, 0.9]}, {"criterion__reductio": ["sum"]}):
        search = SearchCV(
            TorchClassifier(MLP, max_epochs=1), space, cv=2, client=client, progress=False
        )
        with pytest.raises(InvalidParameterError, match="is not a parameter of the") as info:
            search.fit(X, y)
        assert info.value.param == "search_space"
