"""One CV fold of a data-parallel ``SearchCV`` trial: a torch estimator trained on a gang.

``SearchCV(TorchClassifier(...), workers_per_trial=k)`` (:mod:`dmlsearch.runner.gang_trials`)
fits each fold here. The estimator is initialised on the driver as a one-process fit
initialises it (the same seed, so the same initial weights; labels encoded the same way);
its module, criterion and optimizer become a :class:`DataParallelTrainer`'s ``model_fn``,
``loss_fn`` and ``optimizer_fn``, ``max_epochs`` its ``epochs``, and the trainer runs one
rank on each worker of the trial's gang with a per-rank batch of ``batch_size // k`` (the
global batch stays ``batch_size``). The trained weights go back into the estimator's
``module_``: a fitted estimator that predicts as one fitted in one process does.

A fit outside a search with ``trainer__n_workers=k`` (:func:`fit_data_parallel`) is the
same fold on the whole ``X``: a gang of k workers reserved on ``trainer__client``'s
cluster for the fit, then :func:`fit_fold`.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from distributed import Client
from sklearn.utils import check_random_state
from skorch import NeuralNetClassifier
from skorch.dataset import Dataset
from torch.utils.data import DataLoader

from ..exceptions import GangWorkerLostError, InvalidParameterError, TrainingError
from ..runner.cluster import resolve_client
from ..runner.gang import Gang, alive_workers, reserve
from ._inputs import _float32, check_rows
from .trainer import DataParallelTrainer

__all__ = ["check_X", "check_data_parallel", "check_estimator", "fit_data_parallel", "fit_fold"]

#: Seconds a collective of a data-parallel fit (and its ranks' rendezvous) may wait.
FIT_TIMEOUT = 60.0

#: Building a module seeds torch's global generator: one trial thread of the driver at a time.
_INIT_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Build:
    """``model_fn``: the estimator's module built as skorch builds it (weights come after)."""

    module: Any
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> torch.nn.Module:
        if isinstance(self.module, torch.nn.Module):
            return type(self.module)(**self.kwargs) if self.kwargs else copy.deepcopy(self.module)
        built: torch.nn.Module = self.module(**self.kwargs)
        return built


@dataclass(frozen=True)
class _Loss:
    """``loss_fn``: the estimator's criterion, as skorch's ``get_loss`` applies it."""

    criterion: Any
    log: bool  # skorch's classifier feeds NLLLoss the log of the module's probabilities

    def __call__(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.log:
            output = torch.log(output + torch.finfo(output.dtype).eps)
        loss: torch.Tensor = self.criterion(output, target)
        return loss


@dataclass(frozen=True)
class _Optimizer:
    """``optimizer_fn``: the estimator's optimizer with ``lr`` and ``optimizer__*``."""

    cls: Any
    kwargs: dict[str, Any]

    def __call__(self, params: Any) -> torch.optim.Optimizer:
        optimizer: torch.optim.Optimizer = self.cls(params, **self.kwargs)
        return optimizer


def _unused(net: Any, epoch_loop: bool) -> list[tuple[str, Any]]:
    """The estimator's settings a data-parallel fold would silently ignore (``epoch_loop``:
    a fit that runs skorch's epoch loop on the driver, which honours callbacks and
    ``train_split``)."""
    found = []
    if not epoch_loop and net.callbacks not in (None, "disable") and len(net.callbacks):
        found.append(("callbacks", net.callbacks))
    if not epoch_loop and net.train_split is not None:
        found.append(("train_split", net.train_split))
    if net.device not in ("cpu", None):
        found.append(("device", net.device))
    if net.compile:
        found.append(("compile", net.compile))
    if net.dataset is not Dataset:
        found.append(("dataset", net.dataset))
    if net.iterator_train is not DataLoader:
        found.append(("iterator_train", net.iterator_train))
    for key, value in net.get_params(deep=False).items():
        loader = key.startswith("iterator_train__") and key != "iterator_train__shuffle"
        if loader or key.startswith("dataset__") or key == "optimizer__param_groups":
            found.append((key, value))
    return found


def check_estimator(net: Any, k: int, setting: str = "workers_per_trial") -> None:
    """InvalidParameterError unless ``net`` can be trained on a gang of ``k`` workers;
    ``setting``: the parameter that asked for k (a search's, or ``trainer__n_workers``: a
    fit outside a search, which honours skorch's callbacks and validation split)."""
    net._check_params()
    epoch_loop = setting == "trainer__n_workers"
    b = net.batch_size
    if int(b) < k:
        raise InvalidParameterError(
            "batch_size",
            f"batch_size={b} cannot be split over {setting}={k} ranks: each rank "
            f"trains on batch_size // {k} rows a step; use batch_size >= {k} (a multiple of "
            f"{k} keeps the global batch exact) or {setting}=1",
        )
    if epoch_loop:
        from ._dp_epochs import check_callbacks

        check_callbacks(net, k)
    unused = _unused(net, epoch_loop)
    if unused:
        name, value = unused[0]
        raise InvalidParameterError(
            name,
            f"{name}={value!r} is not used by data-parallel training ({setting}={k}): "
            "its ranks run their own epoch loop over NumPy rows on CPU, without skorch's "
            f"callbacks, validation split or data loader; drop it or use {setting}=1",
        )


def check_X(X: Any, setting: str = "workers_per_trial") -> np.ndarray:
    """``X`` as the float32 array a rank trains on, or InvalidParameterError."""
    array = _float32(X)
    if isinstance(array, torch.Tensor):
        array = array.detach().cpu().numpy()
    if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.ndim < 1:
        dense = ": densify it (X.toarray())" if hasattr(X, "tocsr") else ""
        raise InvalidParameterError(
            "X",
            f"data-parallel training ({setting} > 1) takes a dense numeric array "
            f"(NumPy, pandas, a tensor) with one row per sample, got {type(X).__name__}"
            f"{dense}; or use {setting}=1",
        )
    return array


def _trainer(net: Any, k: int, seed: int, timeout: float, epochs: int) -> DataParallelTrainer:
    options = net.trainer_options()
    nll = isinstance(net.criterion_, torch.nn.NLLLoss)
    _, optimizer_kwargs = net.get_params_for_optimizer("optimizer", [])
    return DataParallelTrainer(
        _Build(net.module, net.get_params_for("module")),
        _Loss(net.criterion_, isinstance(net, NeuralNetClassifier) and nll),
        _Optimizer(net.optimizer, optimizer_kwargs),
        epochs=epochs,
        batch_size=int(net.batch_size) // k,
        sync=options["sync"],
        # The other models' options apply where their sync is chosen (a search space may
        # pair them with several trainer__sync choices); the trainer refuses them otherwise.
        average_every=int(options["average_every"]) if options["sync"] == "average" else 1,
        staleness=options["staleness"] if options["sync"] == "ssp" else None,
        shuffle=bool(net.get_params_for("iterator_train").get("shuffle", False)),
        random_state=seed,
        checkpoint_every=None,
        timeout=timeout,
        device="cpu",  # the estimator's own device must be "cpu" here (checked)
    )


def fit_fold(
    gang: Gang,
    net: Any,
    X: Any,
    y: Any,
    draws: np.random.RandomState,
    timeout: float,
    *,
    continued: bool = False,
) -> Any:
    """Fit ``net`` on ``(X, y)`` data-parallel on ``gang``; returns it fitted.

    ``draws``: the trial's generator, drawn from for a ``random_state=None`` net as a
    one-process trial draws from NumPy's global one (which the search seeds per trial).
    ``continued`` (an initialised net: ``warm_start``, ``partial_fit``): train
    ``max_epochs`` more epochs from its module and optimizer state, as a one-process
    continued fit does, instead of initialising it.
    A worker lost mid-training raises :class:`GangWorkerLostError` naming it.
    """
    check_estimator(net, gang.size)
    Xf = check_X(X)
    check_batch_rows(net, len(Xf), gang.size)
    seed = _start(net, draws, continued)
    done = len(net.history) if continued else 0
    optimizer_state = net.optimizer_.state_dict() if continued else None
    check_rows(Xf, y)
    target = net._target(Xf, y)
    net.try_batch(Xf, target)
    trainer = _trainer(net, gang.size, seed, timeout, done + int(net.max_epochs))
    train_on(trainer, gang, net, Xf, target, done, optimizer_state)
    for entry in trainer.history_:  # skorch's per-epoch history, as a one-process fit has it
        net.history.new_epoch()
        net.history.record("epoch", entry["epoch"])
        net.history.record("train_loss", entry["loss"])
        net.history.record("dur", entry["seconds"])
    return net


def check_batch_rows(net: Any, rows: int, k: int) -> None:
    """InvalidParameterError unless ``rows`` fill one global batch of ``k`` ranks."""
    if rows < int(net.batch_size):
        raise InvalidParameterError(
            "batch_size",
            f"{rows} training rows are fewer than batch_size={net.batch_size}, the global "
            f"batch of data-parallel training on {k} workers: each rank trains whole batches "
            "(a one-process fit would train one partial batch), so lower batch_size, pass "
            "more rows at once, or use trainer__n_workers=1",
        )


def train_on(
    trainer: DataParallelTrainer,
    gang: Gang,
    net: Any,
    X: Any,
    y: Any,
    done: int,
    optimizer_state: dict[str, Any] | None,
    shards: list[list[Any]] | None = None,
) -> None:
    """``net``'s module trained by ``trainer`` on ``gang`` from epoch ``done``; the ranks'
    optimizer state comes back into ``net.optimizer_``. A lost worker raises
    :class:`GangWorkerLostError` naming it."""
    try:
        trainer.fit_on_gang(
            gang,
            X,
            y,
            initial=net.module_,
            start_epoch=done,
            optimizer_state=optimizer_state,
            shards=shards,
        )
    except TrainingError as exc:
        if isinstance(exc.__cause__, GangWorkerLostError):
            raise exc.__cause__ from None
        raise
    if trainer.optimizer_state_ is not None:
        # The ranks' optimizer state (momentum, Adam's moments) goes on with the net: a
        # later continued fit, data-parallel or in one process, starts from it.
        net.optimizer_.load_state_dict(trainer.optimizer_state_)


def _start(net: Any, draws: np.random.RandomState, continued: bool) -> int:
    """The seed of ``net``'s fit: a continued net's own, else a new one it is initialised
    with (drawn as a one-process fit draws it)."""
    if continued:
        return int(net.seed_)
    seed = int(draws.randint(2**31 - 1)) if net.random_state is None else net._draw_seed()
    with _INIT_LOCK:
        net._initialize_seeded(seed)
    return seed


def check_data_parallel(net: Any) -> int:
    """``trainer__n_workers`` of a net whose ``fit`` trains on a gang, once everything but
    the cluster and the data is checked (InvalidParameterError saying what to change)."""
    k = int(net.trainer_options()["n_workers"])
    check_estimator(net, k, "trainer__n_workers")
    if net.trainer_options()["client"] is None:
        _current_client(k)
    return k


def _current_client(k: int) -> Client:
    try:
        found = Client.current()
    except ValueError:
        found = None
    if found is None or found.status != "running":
        raise InvalidParameterError(
            "trainer__client",
            f"trainer__n_workers={k} trains on a Dask cluster, but there is no current Dask "
            "client: create a distributed.Client first, pass trainer__client= a Client or a "
            "scheduler address, or set trainer__n_workers=1 to train in this process",
        )
    return found


@contextlib.contextmanager
def _fit_client(net: Any, k: int) -> Iterator[Client]:
    """``trainer__client`` as a client (an address is connected to for the fit only)."""
    given = net.trainer_options()["client"]
    if given is None:
        yield _current_client(k)
        return
    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(resolve_client(given))
        except InvalidParameterError as exc:  # an address it cannot reach
            message = str(exc).removeprefix("client: ")
            raise InvalidParameterError("trainer__client", message) from None
        yield client


def fit_data_parallel(
    net: Any, X: Any, y: Any, fit_params: dict[str, Any], *, partial: bool = False
) -> Any:
    """``net.fit(X, y)`` (``partial``: ``net.partial_fit``) on a gang of
    ``trainer__n_workers`` workers; returns ``net`` fitted.

    As in one process, an initialised net continues (``max_epochs`` more epochs from its
    module and optimizer state) under ``partial_fit``, or under ``fit`` with
    ``warm_start=True``; otherwise it starts afresh. Everything is checked before a worker
    is reserved; the seed is drawn as a one-process fit draws it (``random_state=None``:
    from NumPy's global generator). With callbacks or a ``train_split``, skorch's epoch
    loop runs on the driver and each training epoch on the gang (:mod:`._dp_epochs`).
    """
    from ._dp_epochs import check_callbacks, fit_epochs, needs_epoch_loop, split_epochs

    continued = bool(net.initialized_) and (partial or bool(net.warm_start))
    k = check_data_parallel(net)
    if fit_params:
        raise InvalidParameterError(
            "fit_params",
            f"a data-parallel fit (trainer__n_workers={k}) takes no fit parameters, got "
            f"{sorted(fit_params)}",
        )
    if continued:
        check_callbacks(net, k, continued=True)  # the ones it has run before
    Xf = check_X(X, "trainer__n_workers")
    check_batch_rows(net, len(Xf), k)  # before a worker is reserved
    epochs = split_epochs(net, Xf, y, k) if needs_epoch_loop(net) else None
    with _fit_client(net, k) as client:
        total = len(alive_workers(client, running=False))
        if k > total:
            raise InvalidParameterError(
                "trainer__n_workers",
                f"trainer__n_workers={k} but the cluster has {total} workers: ask for at most "
                f"{total}, add workers, or set trainer__n_workers=1 to train in this process",
            )
        with reserve(client, k, name=f"{type(net).__name__}.fit") as gang:
            draws = check_random_state(None)
            if epochs is not None:
                return fit_epochs(gang, net, epochs, draws, FIT_TIMEOUT, continued=continued)
            return fit_fold(gang, net, Xf, y, draws, FIT_TIMEOUT, continued=continued)
