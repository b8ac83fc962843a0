"""SearchCV(TorchClassifier/TorchRegressor, workers_per_trial=k): each fold data-parallel on a gang."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import time
from traceback import walk_stack
from typing import Any

import cloudpickle
import numpy as np
import pytest
import scipy.sparse
import torch
from distributed import Client
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import KFold

from dmlsearch import InvalidParameterError, SearchCV
from dmlsearch.runner.gang import reserve
from dmlsearch.testing import local_cluster
from dmlsearch.training import TorchClassifier, TorchRegressor
from dmlsearch.training._gang_fold import fit_fold
from dmlsearch.training._rank import rank_batches

# The module class below reaches the workers by value, as a notebook's or script's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.cluster

N, D, K = 240, 4, 2


class MLP(torch.nn.Module):
    def __init__(self, n_in: int = D, hidden: int = 8, n_out: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(n_in, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, n_out)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D))  # float64, as scikit-learn users have it
    return X, np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")  # any labels


def rank_order(n: int, k: int, batch: int) -> np.ndarray:
    """The rows one process must train on, in order, to take the steps the k ranks take.

    The trainer's convention (tests/test_training.py): rank r holds rows
    [r*n//k, (r+1)*n//k) and step t takes its rows t*b..(t+1)*b (b = batch // k);
    without shuffling, step t of one process on the ranks' step-t rows concatenated has
    the gradient the ranks' all-reduce averages (equal per-rank batches, mean losses).
    """
    b = batch // k
    shards = [np.arange(r * n // k, (r + 1) * n // k) for r in range(k)]
    steps = (n // k) // b
    per_rank = [[s[rows] for rows in rank_batches(len(s), steps, b, None)] for s in shards]
    return np.concatenate([per_rank[r][t] for t in range(steps) for r in range(k)])


def sgd_net(cls: type, **kwargs: Any) -> Any:
    params = dict(
        optimizer=torch.optim.SGD,
        lr=0.1,
        max_epochs=3,
        batch_size=16,
        iterator_train__shuffle=False,
    )
    return cls(MLP, **{**params, **kwargs})


def test_each_fold_trains_on_the_gang_as_one_process_on_the_ranks_batches(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    cv = KFold(2)
    base = sgd_net(TorchClassifier)  # random_state=None: drawn from the trial's seed
    search = SearchCV(
        base,
        {"module__hidden": [4, 8]},
        strategy="grid",
        cv=cv,
        scoring="neg_log_loss",
        workers_per_trial=K,
        client=client,
        random_state=0,
        progress=False,
    ).fit(X, y)
    workers = set(client.scheduler_info()["workers"])
    assert [t.state for t in search.trials_] == ["complete"] * 2, search.trials_[0].error
    for trial in search.trials_:
        assert set(trial.worker.split("+")) == workers  # one rank on each worker
        # A one-worker trial: NumPy's global generator seeded with the trial's seed, then
        # each fold's net draws its seed from it; here fed the ranks' batches in order.
        np.random.seed(trial.seed % (2**32))
        for (train, test), fold in zip(cv.split(X), trial.test_scores, strict=True):
            rows = train[rank_order(len(train), K, base.batch_size)]
            net = clone(base).set_params(**trial.params).fit(X[rows], y[rows])
            expected = -log_loss(y[test], net.predict_proba(X[test]), labels=net.classes_)
            assert fold["score"] == pytest.approx(expected, rel=1e-4)
    r = search.cv_results_
    assert np.all(np.isfinite(r["mean_test_score"])) and r["rank_test_score"].min() == 1
    best = search.best_estimator_
    assert isinstance(best, TorchClassifier) and list(best.classes_) == ["no", "yes"]
    assert set(best.predict(X[:20])) <= {"no", "yes"}


def test_a_fold_gives_the_weights_of_one_process_and_a_fitted_estimator(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X = data[0]
    y = X @ np.arange(1.0, D + 1)  # a 1-D regression target
    net = sgd_net(TorchRegressor, module__n_out=1, lr=0.05, random_state=3)
    with reserve(client, K, name="test fold") as gang:
        fitted = fit_fold(gang, clone(net), X, y, np.random.RandomState(0), 30.0)
    rows = rank_order(N, K, net.batch_size)
    single = clone(net).fit(X[rows], y[rows])
    for name, want in single.module_.state_dict().items():
        got = fitted.module_.state_dict()[name]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert fitted.predict(X).shape == (N,)  # 1-D y: 1-D predictions, as in one process
    np.testing.assert_allclose(fitted.predict(X), single.predict(X), rtol=1e-4, atol=1e-5)
    assert [e["epoch"] for e in fitted.history] == [1, 2, 3]
    assert fitted.history[-1, "train_loss"] < fitted.history[0, "train_loss"]


def test_bad_settings_fail_before_any_work(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    net = sgd_net(TorchClassifier, batch_size=16)
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (LogisticRegression(), {}, "XGBClassifier.*TorchClassifier or TorchRegressor"),
        (clone(net).set_params(batch_size=1), {}, "batch_size=1 cannot be split"),
        (clone(net).set_params(batch_size=-1), {}, "batch_size=-1 cannot be split"),
        (clone(net).set_params(train_split=lambda ds, y: (ds, ds)), {}, "train_split="),
        (clone(net).set_params(callbacks=[("x", None)]), {}, "callbacks="),
        (clone(net).set_params(trainer__sync="ring"), {}, "trainer__sync"),
        (clone(net).set_params(trainer__every=2), {}, "trainer__every"),
        (net, {"scheduler": "asha", "resource": "partial_fit", "max_resource": 3}, "resource="),
        (net, {"scheduler": "asha", "resource": "n_samples", "max_resource": 3}, "max_epochs"),
        (net, {"keep_oof": True}, "keep_oof"),
        # What a one-process fit refuses before its first epoch (probe: every trial ran,
        # then AllTrialsFailedError).
        (clone(net).set_params(module__n_out=3), {}, "3 outputs a row but y has 2 classes"),
        (TorchClassifier(MLP, module__hiden=4, batch_size=16), {}, "unexpected keyword"),
    ]
    for estimator, kwargs, text in cases:
        space = {"C": [1.0]} if isinstance(estimator, LogisticRegression) else {"lr": [0.1]}
        search = SearchCV(
            estimator, space, cv=2, workers_per_trial=K, client=client, progress=False, **kwargs
        )
        with pytest.raises(InvalidParameterError, match=text):
            search.fit(X, y)
        assert not hasattr(search, "trials_")
    search = SearchCV(net, {"lr": [0.1]}, cv=2, workers_per_trial=K, client=client, progress=False)
    with pytest.raises(InvalidParameterError, match="dense numeric array"):
        search.fit(scipy.sparse.csr_matrix(X), y)
    assert not hasattr(search, "trials_")


def test_a_searched_batch_size_below_k_fails_only_its_trial(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    search = SearchCV(
        sgd_net(TorchClassifier, max_epochs=1, random_state=0),
        {"batch_size": [1, 16]},
        strategy="grid",
        cv=2,
        workers_per_trial=K,
        client=client,
        progress=False,
        refit=False,
    ).fit(X, y)
    small, fine = search.trials_
    assert small.state == "failed" and "batch_size=1 cannot be split" in (small.error or "")
    assert fine.state == "complete"


@pytest.mark.parametrize("scheduler", [None, "asha"])
def test_a_fold_that_fails_scores_error_score_and_the_other_folds_stand(
    client: Client, scheduler: str | None
) -> None:
    """Probe: one failing fold failed the whole gang trial (AllTrialsFailedError), where a
    one-worker trial and scikit-learn's GridSearchCV score the other fold."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, D))
    # KFold(2): the second fold trains on the first 40 rows, which lack class 2.
    y = np.array([0, 1] * 20 + [0, 1, 2, 2] * 10)
    net = sgd_net(TorchClassifier, module__n_out=3, max_epochs=2, random_state=0)
    extra: dict[str, Any] = {}
    if scheduler is not None:
        extra = dict(scheduler=scheduler, resource="max_epochs", min_resource=1, max_resource=2)
    kwargs = dict(strategy="grid", cv=KFold(2), client=client, progress=False, refit=False)
    runs = {
        k: SearchCV(net, {"lr": [0.01, 0.1]}, workers_per_trial=k, **kwargs, **extra).fit(X, y)
        for k in (1, K)
    }
    for k, search in runs.items():
        scores = search.cv_results_
        assert np.isfinite(scores["split0_test_score"]).all(), k
        assert np.isnan(scores["split1_test_score"]).all(), k
        failed = [t for t in search.trials_ if t.state == "failed"]
        assert failed and all("pass classes= with every label" in (t.error or "") for t in failed)
    # What the error suggests: every fold then trains.
    net.set_params(classes=[0, 1, 2])
    search = SearchCV(net, {"lr": [0.01, 0.1]}, workers_per_trial=K, **kwargs, **extra).fit(X, y)
    assert {t.state for t in search.trials_} == {"complete"}


def _pid() -> int:  # run on a worker by client.run
    return os.getpid()


def _in_epochs() -> bool:  # run on a worker by client.run: is a rank in its epoch loop?
    frames = sys._current_frames().values()
    return any(f.f_code.co_name == "_epoch" for top in frames for f, _ in walk_stack(top))


def test_a_worker_killed_mid_training_fails_that_trial_and_the_search_goes_on(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    X, y = data
    cluster = local_cluster(K)
    try:
        with Client(cluster, set_as_default=False) as client:
            search = SearchCV(
                sgd_net(TorchClassifier, batch_size=4, random_state=0),
                # Trial 0 trains long enough to be killed; the others are quick.
                {"max_epochs": [5000, 1, 2]},
                strategy="grid",
                cv=2,
                workers_per_trial=K,
                client=client,
                progress=False,
                refit=False,
            )
            pool = cf.ThreadPoolExecutor(1)
            fitting = pool.submit(search.fit, X, y)
            deadline = time.monotonic() + 60
            busy: list[str] = []
            while len(busy) < K and time.monotonic() < deadline:
                # Both ranks of trial 0 in their epochs (killed at the rendezvous, the
                # survivor's rank would hold its worker until the rendezvous timed out).
                busy = [w for w, yes in client.run(_in_epochs).items() if yes]
                time.sleep(0.1)
            assert len(busy) == K, "trial 0's ranks were not seen training"
            victim = busy[-1]
            os.kill(client.run(_pid, workers=[victim])[victim], signal.SIGKILL)
            fitting.result(timeout=120)  # the search goes on and ends
            pool.shutdown()
    finally:
        cluster.close()
    lost = search.trials_[0]
    assert lost.state == "failed" and "GangWorkerLostError" in (lost.error or "")
    assert victim in (lost.error or "")
    assert [t.state for t in search.trials_[1:]] == ["complete", "complete"], [
        t.error for t in search.trials_[1:]
    ]
