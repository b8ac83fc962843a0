"""The driver's try of the model and ``loss_fn`` on the first batch, before any rank runs.

It decides the torch dtypes the ranks train ``X`` and ``y`` as, and refuses (with
:class:`InvalidParameterError` naming ``model_fn`` or ``loss_fn``) what would otherwise
fail in every rank or train silently wrong: a model that fails on the batch, a loss that
is not one number depending on the weights, a loss that broadcasts its arguments, a
first loss that is NaN or infinite. The model runs in training mode, as the ranks run it
(a model may return more in training mode: Inception's auxiliary logits), on a copy and
under a forked generator: the caller's module (its BatchNorm statistics, its mode) and
torch's random state are left as they were.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..exceptions import InvalidParameterError
from ._rank import _tensor

__all__ = [
    "ONE_D_HINT",
    "copied",
    "describe",
    "in_training_mode",
    "materialize",
    "try_batch",
]

#: ``warnings.catch_warnings`` swaps process-wide state: one try at a time (search trials
#: prepare their folds on the driver's threads).
_WARNINGS_LOCK = threading.Lock()
#: Added to a model's failure on a 1-D X.
ONE_D_HINT = "; X is 1-D (one value a row): X.reshape(-1, 1) makes it one feature"
#: torch's warning when an element-wise loss broadcasts output and target of other shapes.
_BROADCAST = "different to the input size"


def describe(a: Any) -> str:
    if isinstance(a, (np.ndarray, torch.Tensor)):
        return f"shape {tuple(a.shape)}, dtype {str(a.dtype).removeprefix('torch.')}"
    return type(a).__name__


def _x_dtypes(x: np.ndarray, floating: str) -> list[str]:
    """What ``X`` may be trained as, in order: floats as the model's floating dtype;
    integers as int64 (an ``nn.Embedding``'s indices) if the model takes them, else as
    floats; bool as floats."""
    return ["", floating] if x.dtype.kind in "iu" else [floating]


def _forward(model: torch.nn.Module, xb: np.ndarray, floating: str) -> tuple[torch.Tensor, str]:
    first: Exception | None = None
    for dtype in _x_dtypes(xb, floating):
        try:
            return model(_tensor(xb, dtype)), dtype
        except Exception as exc:
            first = first or exc
    hint = ONE_D_HINT if xb.ndim == 1 else ""
    raise InvalidParameterError(
        "model_fn",
        f"the model, in training mode (as the ranks run it), fails on a batch of X "
        f"({describe(xb)}): {type(first).__name__}: {first}{hint}",
    ) from first


def _loss(loss_fn: Any, out: Any, yb: np.ndarray, dtype: str) -> Any:
    yt = _tensor(yb, dtype)
    with _WARNINGS_LOCK, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loss = loss_fn(out, yt)
        except Exception as exc:
            raise InvalidParameterError(
                "loss_fn",
                f"loss_fn fails on the model's output in training mode, as the ranks train "
                f"it ({describe(out)}), and a batch of y ({describe(yt)}): "
                f"{type(exc).__name__}: {exc}",
            ) from exc
    for w in caught:
        if _BROADCAST in str(w.message):
            raise InvalidParameterError(
                "loss_fn",
                f"loss_fn compares the model's output ({describe(out)}) with y "
                f"({describe(yt)}) by broadcasting, which trains on the wrong pairs: make "
                "them the same shape (e.g. output.squeeze(-1) for a 1-D y, or one output "
                "per column of y)",
            )
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return loss


def copied(model: torch.nn.Module) -> torch.nn.Module | None:
    """``copy.deepcopy(model)``, or None for a module that cannot be copied (one of
    ``torch.nn.utils.weight_norm``'s, which holds a computed tensor)."""
    try:
        return copy.deepcopy(model)
    except Exception:
        return None


@contextlib.contextmanager
def in_training_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` in training mode, as the ranks run it, under a forked generator (dropout
    draws): a copy, or a module that cannot be copied itself, its buffers (BatchNorm's
    statistics) and modes put back after."""
    with torch.random.fork_rng(devices=[]):
        trial = copied(model)
        if trial is not None:
            yield trial.train()
            return
        buffers = [(b, b.detach().clone()) for b in model.buffers()]
        with _modes_kept(model):
            try:
                yield model.train()
            finally:
                with torch.no_grad():
                    for b, saved in buffers:
                        b.copy_(saved)


@contextlib.contextmanager
def _modes_kept(model: torch.nn.Module) -> Iterator[None]:
    """Every submodule's training mode, put back on exit."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        yield
    finally:
        for m, mode in modes:
            m.train(mode)


def materialize(model: torch.nn.Module, xb: np.ndarray, x_dtype: str, seed: int) -> None:
    """Initialise ``model``'s lazy parameters (``LazyLinear``) in place: one forward pass of
    ``xb`` in eval mode (no statistics move, no dropout), seeded. The ranks start from the
    state saved on the driver, which cannot hold parameters that have no shape yet."""
    if not any(torch.nn.parameter.is_lazy(p) for p in model.parameters()):
        return
    with torch.random.fork_rng(devices=[]), torch.no_grad(), _modes_kept(model):
        torch.manual_seed(seed)
        model.eval()(_tensor(xb, x_dtype))


def try_batch(
    model: torch.nn.Module, loss_fn: Any, xb: np.ndarray, yb: np.ndarray
) -> tuple[str, str]:
    """Run ``model`` (in training mode, on a copy) and ``loss_fn`` on one batch; the dtypes
    (torch names, "": as :func:`._rank._tensor` makes them) X and y train as, or
    InvalidParameterError."""
    params = (p.dtype for p in model.parameters() if p.is_floating_point())
    floating = str(next(params, torch.get_default_dtype())).removeprefix("torch.")
    y_dtype = floating if yb.dtype.kind == "f" else ""
    with in_training_mode(model) as trial:
        out, x_dtype = _forward(trial, xb, floating)
        loss = _loss(loss_fn, out, yb, y_dtype)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise InvalidParameterError(
            "loss_fn",
            f"loss_fn must return the batch's loss as a one-element torch.Tensor, returned "
            f"{describe(loss)}: reduce it (e.g. .mean())",
        )
    if not loss.requires_grad:
        raise InvalidParameterError(
            "loss_fn",
            "the loss it returns does not depend on the model's weights (no grad_fn): "
            "compute it from the output with torch operations, not from .item() or NumPy",
        )
    if not bool(torch.isfinite(loss.detach()).all()):
        raise InvalidParameterError(
            "loss_fn",
            f"the loss of the first batch is {float(loss.detach())}: training would make every weight "
            "NaN; check loss_fn (a log of 0?) and the model's initial weights",
        )
    return x_dtype, y_dtype
