"""TorchClassifier/TorchRegressor(trainer__n_workers=k).fit: data-parallel outside a search."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import scipy.sparse
import torch
from distributed import Client, LocalCluster
from sklearn.base import clone
from sklearn.metrics import log_loss
from sklearn.model_selection import KFold
from skorch.callbacks import (
    EarlyStopping,
    EpochScoring,
    Freezer,
    GradientNormClipping,
    Initializer,
    LRScheduler,
)
from skorch.dataset import Dataset, ValidSplit
from test_torch_gang_trials import MLP, rank_order, sgd_net

from dmlsearch import InvalidParameterError, SearchCV
from dmlsearch.training import TorchClassifier, TorchRegressor

pytestmark = pytest.mark.cluster

N, D, K = 240, 4, 2


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, D))
    return X, np.where(X[:, 0] - X[:, 2] > 0, "up", "down")


class Loader(torch.utils.data.DataLoader):
    """A custom data loader: the ranks have their own."""


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for name, want in b.state_dict().items():
        got = a.state_dict()[name]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_a_fit_on_two_workers_gives_a_fitted_net_on_the_driver(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    net = TorchClassifier(
        MLP, lr=0.05, max_epochs=5, batch_size=32, random_state=0,
        trainer__n_workers=K, trainer__client=client,
    )  # fmt: skip
    assert net.fit(X, y) is net
    assert list(net.classes_) == ["down", "up"]
    assert net.score(X, y) > 0.85  # chance is about 0.5
    assert net.predict_proba(X).shape == (N, 2) and set(net.predict(X)) <= {"down", "up"}
    assert [e["epoch"] for e in net.history] == [1, 2, 3, 4, 5]
    assert net.history[-1, "train_loss"] < net.history[0, "train_loss"]
    copy = clone(net)
    assert copy.get_params()["trainer__n_workers"] == K
    assert copy.trainer__client is client  # a handle to the cluster: shared, not copied
    assert clone(copy).set_params(trainer__n_workers=1).get_params()["trainer__n_workers"] == 1
    back = pickle.loads(pickle.dumps(net))
    assert back.trainer__client is None and back.get_params()["trainer__n_workers"] == K
    np.testing.assert_array_equal(back.predict_proba(X), net.predict_proba(X))
    # Fitted again: the same random_state, the same model.
    again = clone(net).fit(X, y)
    assert_same_weights(again.module_, net.module_)


def test_allreduce_equals_one_process_on_the_ranks_batches(
    client: Client, cluster: LocalCluster, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    base = sgd_net(TorchClassifier, random_state=5)
    rows = rank_order(N, K, base.batch_size)
    single = clone(base).fit(X[rows], y[rows])
    with client.as_current():  # trainer__client=None: the current client
        fitted = clone(base).set_params(trainer__n_workers=K).fit(X, y)
    assert_same_weights(fitted.module_, single.module_)
    np.testing.assert_allclose(fitted.predict_proba(X), single.predict_proba(X), atol=1e-5)
    # A regressor, its 1-D y, a scheduler address as the client.
    target = X @ np.arange(1.0, D + 1)
    reg = sgd_net(TorchRegressor, module__n_out=1, lr=0.05, random_state=3)
    single = clone(reg).fit(X[rows], target[rows])
    fitted = reg.set_params(trainer__n_workers=K, trainer__client=cluster.scheduler_address)
    fitted.fit(X, target)
    assert_same_weights(fitted.module_, single.module_)
    assert fitted.predict(X).shape == (N,) and len(fitted.history) == 3


def test_bad_input_is_refused_before_any_work(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    net = sgd_net(TorchClassifier, trainer__n_workers=K, trainer__client=client)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"trainer__n_workers": 0}, "trainer__n_workers: expected an int >= 1"),
        ({"trainer__n_workers": 3}, "trainer__n_workers=3 but the cluster has 2 workers"),
        ({"trainer__client": 42}, "trainer__client: expected None"),
        ({"trainer__client": None}, "no current Dask client"),
        ({"batch_size": 1}, "cannot be split over trainer__n_workers=2"),
        ({"callbacks": [("x", 42)]}, "callback 'x' is 42, not a skorch Callback"),
        ({"callbacks": [GradientNormClipping(1.0)]}, "acts on every training batch"),
        ({"callbacks": [LRScheduler(step_every="batch")]}, "acts on every training batch"),
        ({"callbacks": [EpochScoring("accuracy", on_train=True)]}, "use_caching=False"),
        ({"callbacks": [("f", Freezer("layers.0*"))]}, "'f' \\(Freezer\\) changes"),
        # A callback's parameters, or a callback set by name, as skorch resolves them.
        ({"callbacks__print_log": GradientNormClipping(1.0)}, "'print_log'"),
        (
            {"train_split": ValidSplit(0.9), "batch_size": 32},
            "24 training rows are fewer than batch_size=32",
        ),
        ({"train_split": lambda ds, y: (list(range(9)), None)}, "train_split must return"),
        ({"iterator_train": Loader}, "iterator_train="),
        ({"iterator_train__num_workers": 2}, "iterator_train__num_workers="),
    ]
    for params, text in cases:
        candidate = clone(net).set_params(**params)
        with pytest.raises(InvalidParameterError, match=text):
            candidate.fit(X, y)
        assert not candidate.initialized_
    with pytest.raises(InvalidParameterError, match="20 training rows are fewer than batch"):
        clone(net).set_params(batch_size=32).partial_fit(X[:20], y[:20])
    # A callback's parameters as skorch resolves them (given to the constructor).
    per_batch = sgd_net(
        TorchClassifier, trainer__n_workers=K, trainer__client=client,
        callbacks=[("lrs", LRScheduler)], callbacks__lrs__step_every="batch",
    )  # fmt: skip
    with pytest.raises(InvalidParameterError, match="'lrs' \\(LRScheduler\\) acts on every"):
        per_batch.fit(X, y)
    assert not per_batch.initialized_
    with pytest.raises(InvalidParameterError, match="no fit parameters"):
        clone(net).fit(X, y, epochs=2)
    with pytest.raises(InvalidParameterError, match="trainer__n_workers=3 but the cluster"):
        clone(net).set_params(trainer__n_workers=3).partial_fit(X, y)
    with pytest.raises(InvalidParameterError, match=r"dense numeric array.*trainer__n_workers=1"):
        clone(net).fit(scipy.sparse.csr_matrix(X), y)


class DropoutMLP(torch.nn.Module):
    """Dropout draws from torch's generator at every step."""

    def __init__(self, n_in: int = D, hidden: int = 16, n_out: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(n_in, hidden),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.3),
            torch.nn.Linear(hidden, n_out),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@pytest.mark.parametrize("sync", ["allreduce", "average"])
def test_a_continued_data_parallel_fit_is_the_fit_of_all_epochs_at_once(
    client: Client, data: tuple[np.ndarray, np.ndarray], sync: str
) -> None:
    X, y = data
    # Shuffled batches, dropout and momentum: each depends on where the epochs stopped
    # unless the continued fit picks up the seeds and the optimizer state. With "average"
    # each rank has its own momentum and a continued job starts every rank from rank 0's
    # (docs/training.md): exact only with a stateless optimizer, so none there.
    momentum = 0.9 if sync == "allreduce" else 0.0
    base = TorchClassifier(
        DropoutMLP, optimizer=torch.optim.SGD, lr=0.05, optimizer__momentum=momentum,
        batch_size=32, iterator_train__shuffle=True, random_state=7,
        trainer__n_workers=K, trainer__client=client, trainer__sync=sync,
        trainer__average_every=2,
    )  # fmt: skip
    at_once = clone(base).set_params(max_epochs=5).fit(X, y)
    warm = clone(base).set_params(max_epochs=2).fit(X, y)
    if momentum:
        assert warm.optimizer_.state_dict()["state"], "the ranks' momentum came back"
    warm.set_params(warm_start=True, max_epochs=3).fit(X, y)
    assert [e["epoch"] for e in warm.history] == [1, 2, 3, 4, 5]
    assert_same_weights(warm.module_, at_once.module_)
    np.testing.assert_allclose(
        warm.history[:, "train_loss"], at_once.history[:, "train_loss"], rtol=1e-5
    )
    # partial_fit continues too (classes= on the first call, as scikit-learn's), and
    # fit without warm_start starts afresh.
    part = clone(base).set_params(max_epochs=1)
    for _ in range(5):
        part.partial_fit(X, y, classes=["down", "up"])
    assert len(part.history) == 5
    assert_same_weights(part.module_, at_once.module_)
    part.fit(X, y)
    assert len(part.history) == 1


def test_a_data_parallel_fit_continues_in_one_process_with_its_optimizer_state(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    net = sgd_net(
        TorchClassifier, optimizer__momentum=0.9, max_epochs=2, random_state=3,
        trainer__n_workers=K, trainer__client=client,
    ).fit(X, y)  # fmt: skip
    momentum = {
        k: v["momentum_buffer"].clone() for k, v in net.optimizer_.state_dict()["state"].items()
    }
    assert momentum and all(float(b.abs().sum()) > 0 for b in momentum.values())
    before = net.history[-1, "train_loss"]
    net.set_params(trainer__n_workers=1, warm_start=True, max_epochs=2).fit(X, y)
    assert len(net.history) == 4 and net.history[-1, "train_loss"] < before


def test_a_search_trial_trains_on_workers_per_trial_and_the_refit_on_n_workers(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    base = sgd_net(TorchClassifier, random_state=5, trainer__n_workers=K, trainer__client=client)
    cv = KFold(2)
    search = SearchCV(
        base, {"lr": [0.1]}, strategy="grid", cv=cv, scoring="neg_log_loss",
        workers_per_trial=1, client=client, progress=False,
    ).fit(X, y)  # fmt: skip
    (trial,) = search.trials_
    assert trial.state == "complete", trial.error
    assert "+" not in trial.worker  # one worker: the trial's k=1 won over trainer__n_workers
    one = clone(base).set_params(trainer__n_workers=1)
    for (train, test), fold in zip(cv.split(X), trial.test_scores, strict=True):
        net = clone(one).fit(X[train], y[train])  # in one process, as the trial trained
        expected = -log_loss(y[test], net.predict_proba(X[test]), labels=net.classes_)
        assert fold["score"] == pytest.approx(expected, rel=1e-4)
    # best_estimator_ is refitted on the driver data-parallel, on trainer__client's cluster.
    rows = rank_order(N, K, base.batch_size)
    assert_same_weights(search.best_estimator_.module_, clone(one).fit(X[rows], y[rows]).module_)
    # With no client for that refit, the search is refused before any trial.
    lost = SearchCV(
        clone(base).set_params(trainer__client=None), {"lr": [0.1]}, cv=2,
        workers_per_trial=1, client=client, progress=False,
    )  # fmt: skip
    with pytest.raises(InvalidParameterError, match="no current Dask client"):
        lost.fit(X, y)
    assert not hasattr(lost, "trials_")


def test_callbacks_and_a_validation_split_run_as_in_one_process(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    split = ValidSplit(4, stratified=True)
    base = sgd_net(TorchClassifier, random_state=2, trainer__n_workers=K, trainer__client=client)
    net = clone(base).set_params(
        max_epochs=4, train_split=split,
        callbacks=[("acc", EpochScoring("accuracy", lower_is_better=False))],
    ).fit(X, y)  # fmt: skip
    assert len(net.history) == 4
    for key in ("train_loss", "valid_loss", "valid_acc", "accuracy", "dur"):
        assert np.all(np.isfinite(net.history[:, key])), key
    # The training epochs are the data-parallel fit of the split's training rows.
    codes = np.searchsorted(net.classes_, y)
    train, valid = split(Dataset(X, codes), codes)  # the rows ValidSplit keeps
    train_rows, valid_rows = np.asarray(train.indices), np.asarray(valid.indices)
    plain = clone(base).set_params(max_epochs=4).fit(X[train_rows], y[train_rows])
    assert_same_weights(net.module_, plain.module_)
    np.testing.assert_allclose(
        net.history[:, "train_loss"], plain.history[:, "train_loss"], rtol=1e-5
    )
    expected_acc = (net.predict(X[valid_rows]) == y[valid_rows]).mean()
    assert net.history[-1, "accuracy"] == pytest.approx(expected_acc)
    assert net.history[-1, "valid_acc"] == pytest.approx(expected_acc)


def test_an_lr_schedule_reaches_the_ranks_and_early_stopping_ends_the_fit(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    base = sgd_net(TorchClassifier, random_state=4, trainer__n_workers=K, trainer__client=client)
    step = LRScheduler(policy=torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)
    scheduled = clone(base).set_params(lr=0.2, max_epochs=3, callbacks=[step]).fit(X, y)
    assert scheduled.optimizer_.param_groups[0]["lr"] == pytest.approx(0.2 * 0.5**3)
    # The same epochs with the rate set by hand between continued fits.
    by_hand = clone(base).set_params(lr=0.2, max_epochs=1).fit(X, y)
    for lr in (0.1, 0.05):
        by_hand.set_params(lr=lr, warm_start=True).fit(X, y)
    assert_same_weights(scheduled.module_, by_hand.module_)
    # A rate that makes the validation loss grow: stopped after patience epochs.
    stopper = EarlyStopping(monitor="valid_loss", patience=2, threshold=0.0)
    stopped = clone(base).set_params(
        lr=50.0, max_epochs=30, train_split=ValidSplit(3), callbacks=[stopper]
    ).fit(X, y)  # fmt: skip
    assert 3 <= len(stopped.history) < 30
    assert stopped.predict(X).shape == (N,)


def test_verbose_prints_the_epochs_and_an_initializer_runs_on_the_driver(
    client: Client, data: tuple[np.ndarray, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    X, y = data
    constant = Initializer("layers.0.weight", torch.nn.init.zeros_)
    net = sgd_net(
        TorchClassifier, random_state=1, verbose=1, max_epochs=2, callbacks=[constant],
        trainer__n_workers=K, trainer__client=client,
    )  # fmt: skip
    net.fit(X, y)
    printed = capsys.readouterr().out
    assert "train_loss" in printed and len(net.history) == 2
    assert "train_loss_best" in net.history[-1]  # skorch's default callbacks ran
    # The zeroed weights were what the ranks started from: a fit from them, one process.
    one = sgd_net(TorchClassifier, random_state=1, max_epochs=2, callbacks=[constant])
    rows = rank_order(N, K, one.batch_size)
    assert_same_weights(net.module_, one.fit(X[rows], y[rows]).module_)
