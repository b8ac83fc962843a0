"""A data-parallel fit with skorch's callbacks and validation split, epoch by epoch.

``TorchClassifier(..., trainer__n_workers=k, callbacks=[...], train_split=ValidSplit(5))``:
skorch's fit loop runs on the driver as in one process (``on_train_begin``, each epoch's
``on_epoch_begin``, the validation epoch, ``on_epoch_end``, ``on_train_end``) and only
the training epoch is data-parallel: each one is a job of the gang's ranks continued from
the net's module and optimizer state (:func:`dmlsearch.training._gang_fold.fit_fold`'s
continuation; the ranks reseed per epoch, so k epochs one at a time give the model of k
epochs at once). The rows are placed on the gang's workers once, before the first epoch;
each epoch then moves only the weights and optimizer state. Callbacks that change the
optimizer's hyperparameters between epochs (``LRScheduler``) reach the ranks through its
state; ``EarlyStopping`` ends the loop as in one process.

What the ranks cannot run is refused before any work: callbacks that act on every
training batch (``on_batch_begin``, ``on_batch_end``, ``on_grad_computed``: gradient
clipping, per-batch learning-rate steps, scoring cached training predictions) and
``ParamMapper`` (``Freezer``...), whose ``requires_grad`` changes stay on the driver.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from skorch.callbacks import (
    BatchScoring,
    Callback,
    EpochScoring,
    Initializer,
    LRScheduler,
    ParamMapper,
    ProgressBar,
)
from skorch.dataset import Dataset
from torch.utils.data import Subset

from ..exceptions import InvalidParameterError
from ..runner.gang import Gang
from ._inputs import check_rows

__all__ = ["EpochData", "check_callbacks", "fit_epochs", "needs_epoch_loop", "split_epochs"]

_BATCH_HOOKS = ("on_batch_begin", "on_batch_end", "on_grad_computed")


def needs_epoch_loop(net: Any) -> bool:
    """Whether a data-parallel fit of ``net`` runs skorch's loop epoch by epoch (it has
    callbacks of its own, a validation split, or prints its epochs)."""
    callbacks = net.callbacks
    has_callbacks = callbacks not in (None, "disable") and len(callbacks) > 0
    set_by_name = any(key.startswith("callbacks__") for key in vars(net))
    return has_callbacks or set_by_name or net.train_split is not None or bool(net.verbose)


def _per_training_batch(callback: Any) -> bool:
    """Whether ``callback`` needs to see the training batches (which the ranks run)."""
    if isinstance(callback, LRScheduler):
        return callback.step_every != "epoch"
    if isinstance(callback, EpochScoring):
        return bool(callback.on_train) and bool(callback.use_caching)
    if isinstance(callback, BatchScoring):
        return bool(callback.on_train)
    if isinstance(callback, ProgressBar):
        return False  # it shows the batches it sees: the validation ones
    return any(
        getattr(type(callback), hook, None) is not getattr(Callback, hook) for hook in _BATCH_HOOKS
    )


def _will_run(net: Any, continued: bool) -> list[tuple[str, Any]]:
    """The callbacks a fit of ``net`` will run, as skorch's ``initialize_callbacks`` makes
    them (``callbacks__<name>`` replacing a callback or setting its parameters), without
    changing the net; a continued fit keeps the ones it has (``callbacks_``)."""
    if continued and hasattr(net, "callbacks_"):
        return list(net.callbacks_)
    if net.callbacks == "disable":
        return []
    out = []
    for name, given in net._uniquely_named_callbacks():
        callback = net.__dict__.get(f"callbacks__{name}", given)
        params = net.get_params_for(f"callbacks__{name}")
        if isinstance(callback, type) and issubclass(callback, Callback):
            callback = callback(**params)
        elif isinstance(callback, Callback) and params:
            callback = copy.deepcopy(callback).set_params(**params)
        if callback is not None:
            out.append((name, callback))
    return out


def check_callbacks(net: Any, k: int, continued: bool = False) -> None:
    """InvalidParameterError for a callback a data-parallel fit cannot honour."""
    for name, callback in _will_run(net, continued):
        if not isinstance(callback, Callback):
            raise InvalidParameterError(
                "callbacks",
                f"callback {name!r} is {callback!r}, not a skorch Callback: pass "
                "skorch.callbacks instances, or (name, callback) pairs",
            )
        # An Initializer changes weights on the driver before an epoch's job, which
        # sends them; other mappers (Freezer) change requires_grad, which it does not.
        if isinstance(callback, ParamMapper) and not isinstance(callback, Initializer):
            raise InvalidParameterError(
                "callbacks",
                f"callback {name!r} ({type(callback).__name__}) changes the module's "
                f"parameters on the driver, which the {k} ranks would not see: drop it, or "
                "use trainer__n_workers=1",
            )
        if _per_training_batch(callback):
            raise InvalidParameterError(
                "callbacks",
                f"callback {name!r} ({type(callback).__name__}) acts on every training batch, "
                f"but a data-parallel fit (trainer__n_workers={k}) trains its batches on the "
                "ranks, where callbacks do not run: use its per-epoch form (LRScheduler("
                "step_every='epoch'), EpochScoring(use_caching=False)), drop it, or use "
                "trainer__n_workers=1",
            )


def _rows(dataset: Any, role: str) -> tuple[np.ndarray, Any]:
    """The ``(X, y)`` rows of a dataset ``train_split`` returned."""
    if isinstance(dataset, Subset) and isinstance(dataset.dataset, Dataset):
        index = np.asarray(dataset.indices)
        base = dataset.dataset
        return np.asarray(base.X)[index], None if base.y is None else np.asarray(base.y)[index]
    if isinstance(dataset, Dataset):
        return np.asarray(dataset.X), None if dataset.y is None else np.asarray(dataset.y)
    raise InvalidParameterError(
        "train_split",
        f"a data-parallel fit needs the {role} rows as arrays: train_split must return "
        f"skorch Datasets or torch Subsets of one (as skorch's ValidSplit does), got "
        f"{type(dataset).__name__}",
    )


@dataclass(frozen=True)
class EpochData:
    """``X`` and ``y`` split by the net's ``train_split``, checked before a worker is
    reserved and before the net is initialised."""

    X: np.ndarray
    y: Any
    target: Any
    train: Any
    valid: Any
    X_train: np.ndarray
    y_train: Any


def split_epochs(net: Any, X: np.ndarray, y: Any, k: int) -> EpochData:
    """The rows of a fit by :func:`fit_epochs` on ``k`` ranks (``X``: float32, checked)."""
    from ._gang_fold import check_batch_rows

    check_rows(X, y)
    target = net._target(X, y)
    train, valid = net.get_split_datasets(X, target)
    X_train, y_train = _rows(train, "training")
    check_batch_rows(net, len(X_train), k)
    return EpochData(X, y, target, train, valid, X_train, y_train)


def fit_epochs(
    gang: Gang,
    net: Any,
    data: EpochData,
    draws: np.random.RandomState,
    timeout: float,
    *,
    continued: bool,
) -> Any:
    """``net`` fitted by skorch's epoch loop on the driver, its training epochs
    data-parallel on ``gang``; returns ``net``."""
    from ._gang_fold import _start, _trainer, train_on

    X, y, train, valid = data.X, data.y, data.train, data.valid
    X_train, y_train = data.X_train, data.y_train
    seed = _start(net, draws, continued)
    net.check_data(X, data.target)
    net.try_batch(X_train, y_train)
    iterator_valid = None if valid is None else net.get_iterator(valid, training=False)
    # Placed once, dealt out as each epoch's trainer would deal them (shuffled by the seed).
    shards = _trainer(net, gang.size, seed, timeout, 1).place(gang, X_train, y_train)
    on_epoch = {"dataset_train": train, "dataset_valid": valid}
    net.notify("on_train_begin", X=X, y=y)
    try:
        for _ in range(int(net.max_epochs)):
            net.notify("on_epoch_begin", **on_epoch)
            done = len(net.history) - 1  # the epoch just begun is in the history
            trainer = _trainer(net, gang.size, seed, timeout, done + 1)
            state = net.optimizer_.state_dict()  # an LRScheduler's rate with it
            train_on(trainer, gang, net, X_train, y_train, done, state, shards)
            (entry,) = trainer.history_
            # As skorch's training epoch records it: one "batch" with the ranks' mean loss
            # over the rows the epoch trained, so PassthroughScoring gives train_loss.
            net.history.new_batch()
            net.history.record_batch("train_loss", entry["loss"])
            net.history.record_batch("train_batch_size", len(X_train))
            k, b = gang.size, int(net.batch_size) // gang.size
            net.history.record("train_batch_count", (len(X_train) // k) // b)
            net.run_single_epoch(
                iterator_valid, training=False, prefix="valid", step_fn=net.validation_step
            )
            with warnings.catch_warnings():
                # The driver's optimizer never steps (the ranks' do): an LRScheduler's
                # step would be taken for one before the first optimizer step.
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler")
                net.notify("on_epoch_end", **on_epoch)
    except KeyboardInterrupt:
        pass  # as skorch: EarlyStopping (or Ctrl-C) ends training, the net stays fitted
    net.notify("on_train_end", X=X, y=y)
    return net
