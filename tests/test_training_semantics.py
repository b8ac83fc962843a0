"""DataParallelTrainer: what ``shuffle`` deals to the ranks, whose buffers the model keeps,
the first-batch check's mode, the user's module left alone, read-only input, a diverged
fit, and "average" with momentum (docs/training.md)."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import cloudpickle
import numpy as np
import pandas as pd
import pytest
import torch
from distributed import Client

from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.registry import Registry
from dmlsearch.training import DataParallelTrainer, TorchClassifier
from dmlsearch.training._rank import _tensor
from dmlsearch.training._trial import copied, try_batch

cloudpickle.register_pickle_by_value(sys.modules[__name__])

N, D, B, SEED = 200, 3, 10, 5
F = torch.nn.functional


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.01)


def normed() -> torch.nn.Module:
    """BatchNorm on the input: its running mean is the mean of the rows a rank saw."""
    return torch.nn.Sequential(torch.nn.BatchNorm1d(D), torch.nn.Linear(D, 2))


@pytest.fixture(scope="module")
def sorted_rows() -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by label (a CSV sorted by class): class 0 about -10, class 1 about +10."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], N // 2)
    X = (rng.normal(size=(N, D)) + np.where(y[:, None] == 0, -10.0, 10.0)).astype(np.float32)
    return X, y


def trainer(client: Client, **kwargs: Any) -> DataParallelTrainer:
    params: dict[str, Any] = {
        "model_fn": normed,
        "loss_fn": F.cross_entropy,
        "optimizer_fn": sgd,
        "epochs": 1,
        "batch_size": B,
        "random_state": SEED,
        "client": client,
        "device": "cpu",
    }
    return DataParallelTrainer(**{**params, **kwargs})


def running_stats(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BatchNorm1d's running mean and variance after training on ``X``'s batches in order."""
    mean, var = np.zeros(D), np.ones(D)
    for t in range(len(X) // B):
        batch = X[t * B : (t + 1) * B].astype(np.float64)
        mean = 0.9 * mean + 0.1 * batch.mean(0)
        var = 0.9 * var + 0.1 * batch.var(0, ddof=1)
    return mean, var


@pytest.mark.cluster
def test_shuffle_deals_label_sorted_rows_to_the_ranks_at_random(
    client: Client, sorted_rows: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = sorted_rows
    # shuffle=False: rank 0 holds the first half, class 0 only (its running mean is the
    # model's under allreduce, as under DDP).
    contiguous = trainer(client, shuffle=False).fit(X, y).model_[0]
    np.testing.assert_allclose(contiguous.running_mean, running_stats(X[: N // 2])[0], atol=1e-5)
    # shuffle=True: the rows are permuted before they are dealt out, so rank 0's batches
    # mix both classes (before, they were rank 0's half in another order: about -6.5).
    shuffled = trainer(client, shuffle=True).fit(X, y)
    assert np.abs(shuffled.model_[0].running_mean.numpy()).max() < 3
    again = trainer(client, shuffle=True).fit(X, y).model_.state_dict()
    for name, value in shuffled.model_.state_dict().items():
        assert torch.equal(value, again[name]), name  # the same rows for the same seed


@pytest.mark.cluster
def test_ssp_returns_the_mean_of_the_ranks_floating_buffers(
    client: Client, sorted_rows: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = sorted_rows
    fitted = trainer(client, shuffle=False, sync="ssp").fit(X, y)
    norm = fitted.model_[0]
    # A BatchNorm's statistics do not depend on the weights: each rank's are those of its
    # own rows in order, and the model holds their mean (before: rank 0's alone).
    (m0, v0), (m1, v1) = running_stats(X[: N // 2]), running_stats(X[N // 2 :])
    np.testing.assert_allclose(norm.running_mean, (m0 + m1) / 2, atol=1e-4)
    np.testing.assert_allclose(norm.running_var, (v0 + v1) / 2, rtol=1e-5)
    assert int(norm.num_batches_tracked) == (N // 2) // B  # a count: rank 0's
    final = fitted.checkpoint_.load()["model"]
    for name, value in fitted.model_.state_dict().items():
        assert torch.equal(final[name], value), name


def bf16_normed() -> torch.nn.Module:
    return normed().to(torch.bfloat16)


@pytest.mark.cluster
@pytest.mark.parametrize("sync", ["ssp", "average", "allreduce"])
def test_a_bfloat16_model_trains_with_every_sync(
    client: Client, sorted_rows: tuple[np.ndarray, np.ndarray], sync: str
) -> None:
    # The parameter server's weights, gradients and buffers went through .numpy(), which
    # has no bfloat16: every ssp step failed on the ranks.
    X, y = sorted_rows
    fitted = trainer(client, model_fn=bf16_normed, sync=sync, epochs=2).fit(X / 10, y)
    assert {p.dtype for p in fitted.model_.parameters()} == {torch.bfloat16}
    assert fitted.model_[0].running_mean.dtype == torch.bfloat16
    losses = [e["loss"] for e in fitted.history_]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


class AuxNet(torch.nn.Module):
    """Auxiliary logits in training mode only, as torchvision's GoogLeNet and Inception3."""

    def __init__(self) -> None:
        super().__init__()
        self.main = torch.nn.Linear(D, 2)
        self.aux = torch.nn.Linear(D, 2)

    def forward(self, x: torch.Tensor) -> Any:
        if self.training:
            return self.main(x), self.aux(x)
        return self.main(x)


def aux_loss(out: Any, target: torch.Tensor) -> torch.Tensor:
    main, aux = out
    return F.cross_entropy(main, target) + 0.3 * F.cross_entropy(aux, target)


@pytest.mark.cluster
def test_a_model_with_auxiliary_outputs_in_training_mode_trains(
    client: Client, sorted_rows: tuple[np.ndarray, np.ndarray]
) -> None:
    fitted = trainer(client, model_fn=AuxNet, loss_fn=aux_loss).fit(*sorted_rows)
    assert np.isfinite(fitted.history_[0]["loss"])


def test_the_first_batch_check_leaves_the_module_and_the_generator_as_they_were() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(D, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5)
    ).eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    xb = np.random.default_rng(0).normal(size=(8, D)).astype(np.float32)
    seen = []

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        seen.append((out == 0).any())  # dropout ran: the check is in training mode
        return F.cross_entropy(out, target)

    try_batch(model, loss, xb, np.zeros(8, dtype=np.int64))
    assert seen == [torch.tensor(True)]
    assert not model.training and not model[1].training
    assert torch.equal(torch.get_rng_state(), rng)
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    # A module deepcopy cannot copy (old weight_norm) runs itself, its buffers put back.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # weight_norm is deprecated
        uncopyable = torch.nn.Sequential(
            torch.nn.utils.weight_norm(torch.nn.Linear(D, 4)), torch.nn.BatchNorm1d(4)
        ).eval()
    assert copied(uncopyable) is None
    before = uncopyable[1].running_mean.clone()
    try_batch(uncopyable, F.cross_entropy, xb, np.zeros(8, dtype=np.int64))
    assert torch.equal(uncopyable[1].running_mean, before) and not uncopyable.training
    with pytest.raises(InvalidParameterError, match="in training mode"):
        try_batch(AuxNet(), F.cross_entropy, xb, np.zeros(8, dtype=np.int64))


@pytest.mark.cluster
def test_a_model_fn_returning_one_module_leaves_it_untrained(
    client: Client, sorted_rows: tuple[np.ndarray, np.ndarray]
) -> None:
    shared = normed()
    start = {k: v.clone() for k, v in shared.state_dict().items()}
    first = trainer(client, model_fn=lambda: shared).fit(*sorted_rows)
    assert first.model_ is not shared
    for k, v in shared.state_dict().items():
        assert torch.equal(v, start[k]), k  # the user's module is not trained into
    second = trainer(client, model_fn=lambda: shared).fit(*sorted_rows)
    for k, v in second.model_.state_dict().items():  # from the same start, the same model
        assert torch.equal(v, first.model_.state_dict()[k]), k


def test_read_only_arrays_become_tensors_without_a_warning() -> None:
    y = pd.Series(np.arange(4)).to_numpy()  # pandas 3 (copy-on-write): read-only
    X = np.ones((4, D), dtype=np.float32)
    X.flags.writeable = False  # a shard scattered from such an array is read-only too
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch: "The given NumPy array is not writable"
        assert torch.equal(_tensor(X), torch.ones(4, D))
        assert torch.equal(_tensor(y), torch.arange(4))
    writable = np.ones((4, D), dtype=np.float32)
    assert _tensor(writable).data_ptr() == writable.ctypes.data  # not copied


def nan_on_workers(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss on the driver's check, NaN in the ranks (a fit that diverges)."""
    from distributed import get_worker

    loss = F.cross_entropy(out, target)
    try:
        get_worker()
    except ValueError:
        return loss
    return loss * float("nan")


@pytest.mark.cluster
def test_a_diverged_fit_warns_and_is_not_registered(
    client: Client, sorted_rows: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    with Registry(f"sqlite:///{tmp_path / 'reg.db'}") as registry:
        t = trainer(client, loss_fn=nan_on_workers, epochs=2, registry=registry, model_name="m")
        with pytest.warns(RuntimeWarning, match="not finite from epoch 1 on.*not registered"):
            t.fit(*sorted_rows)
        assert t.model_version_ is None and registry.models() == []
        assert np.isnan(t.history_[-1]["loss"])  # model_ and history_ stay to look at


def test_a_diverged_torch_estimator_warns_as_the_trainer_does() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, D)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    net = TorchClassifier(
        torch.nn.Linear, module__in_features=D, module__out_features=2, lr=1e38,
        optimizer=torch.optim.SGD, max_epochs=3, random_state=0,
    )  # fmt: skip
    with pytest.warns(RuntimeWarning, match="smaller learning rate") as caught:
        net.fit(X * 1e30, y)
    assert len(caught) == 1


def momentum(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True)


def adam(params: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=0.05)


@pytest.mark.cluster
def test_average_every_step_equals_allreduce_with_momentum_but_not_with_adam(
    client: Client, sorted_rows: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = sorted_rows
    mlp = lambda: torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))  # noqa: E731
    gaps = {}
    for name, optimizer in (("momentum", momentum), ("adam", adam)):
        models = [
            trainer(client, model_fn=mlp, optimizer_fn=optimizer, epochs=2, sync=sync)
            .fit(X / 10, y)
            .model_
            for sync in ("allreduce", "average")
        ]
        gaps[name] = max(
            float((a - b).detach().abs().max())
            for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True)
        )
    # The mean of the ranks' momentum buffers follows the all-reduced one (linear in the
    # gradient); Adam's moments are not linear in it.
    assert gaps["momentum"] < 1e-5
    assert gaps["adam"] > 1e-3
