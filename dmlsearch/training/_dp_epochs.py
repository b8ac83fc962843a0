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

import warnings
from typing import Any

import numpy as np
from skorch.callbacks import (
    BatchScoring,
    Callback,
    EpochScoring,
    LRScheduler,
    ParamMapper,
    ProgressBar,
)
from skorch.dataset import Dataset
from torch.utils.data import Subset

from ..exceptions import InvalidParameterError
from ..runner.gang import Gang
from ._data import place_shards
from ._inputs import check_rows

__all__ = ["check_callbacks", "fit_epochs", "needs_epoch_loop"]

_BATCH_HOOKS = ("on_batch_begin", "on_batch_end", "on_grad_computed")


def needs_epoch_loop(net: Any) -> bool:
    """Whether a data-parallel fit of ``net`` runs skorch's loop epoch by epoch (it has
    callbacks of its own or a validation split)."""
    callbacks = net.callbacks
    has_callbacks = callbacks not in (None, "disable") and len(callbacks) > 0
    return has_callbacks or net.train_split is not None


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


def check_callbacks(net: Any, k: int) -> None:
    """InvalidParameterError for a callback a data-parallel fit cannot honour."""
    if net.callbacks in (None, "disable"):
        return
    for item in net.callbacks:
        name, callback = item if isinstance(item, tuple) else (type(item).__name__, item)
        if isinstance(callback, type) and issubclass(callback, Callback):
            callback = callback()
        if not isinstance(callback, Callback):
            raise InvalidParameterError(
                "callbacks",
                f"callback {name!r} is {callback!r}, not a skorch Callback: pass "
                "skorch.callbacks instances, or (name, callback) pairs",
            )
        if isinstance(callback, ParamMapper):
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


def fit_epochs(
    gang: Gang,
    net: Any,
    X: np.ndarray,
    y: Any,
    draws: np.random.RandomState,
    timeout: float,
    *,
    continued: bool,
) -> Any:
    """``net`` fitted by skorch's epoch loop on the driver, its training epochs
    data-parallel on ``gang`` (``X``: float32 rows, checked); returns ``net``."""
    from ._gang_fold import _start, _trainer, check_batch_rows, train_on

    check_rows(X, y)
    target = net._target(X, y)
    # Split (and refuse a split it cannot use) before the net is initialised.
    train, valid = net.get_split_datasets(X, target)
    X_train, y_train = _rows(train, "training")
    seed = _start(net, draws, continued)
    net.check_data(X, target)
    check_batch_rows(net, len(X_train), gang.size)
    net.try_batch(X_train, y_train)
    iterator_valid = None if valid is None else net.get_iterator(valid, training=False)
    shards = place_shards(gang.client, gang.workers, X_train, y_train)
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
