"""The checks of ``DataParallelTrainer``'s parameters, run in ``fit`` before anything is sent."""

from __future__ import annotations

import difflib
import numbers
from typing import Any

from ..ensemble._common import check_bool
from ..exceptions import InvalidParameterError
from ._device import check_device_params

__all__ = ["SYNCS", "check_int", "check_name", "check_params"]

#: The synchronisation models ``sync`` accepts.
SYNCS = ("allreduce", "average", "ssp")


def check_int(name: str, value: Any, low: int, *, none: bool = False) -> None:
    if none and value is None:
        return
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        extra = " or None" if none else ""
        raise InvalidParameterError(name, f"expected an int >= {low}{extra}, got {value!r}")


def check_name(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidParameterError(name, f"expected a non-empty model name or None, got {value!r}")


def _check_sync(sync: Any, staleness: Any) -> None:
    if sync not in SYNCS:
        close = difflib.get_close_matches(str(sync), SYNCS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidParameterError("sync", f"unknown {sync!r}{hint} (one of {', '.join(SYNCS)})")
    check_int("staleness", staleness, 0, none=True)


def check_params(t: Any) -> None:
    """Every parameter of the trainer ``t`` that can be checked without the cluster."""
    for name in ("model_fn", "loss_fn", "optimizer_fn"):
        if not callable(getattr(t, name)):
            raise InvalidParameterError(name, f"expected a callable, got {getattr(t, name)!r}")
    check_int("epochs", t.epochs, 1)
    check_int("batch_size", t.batch_size, 1)
    check_int("n_workers", t.n_workers, 1)
    check_int("average_every", t.average_every, 1)
    check_int("checkpoint_every", t.checkpoint_every, 1, none=True)
    check_bool("shuffle", t.shuffle)
    check_bool("elastic", t.elastic)
    _check_sync(t.sync, t.staleness)
    if not isinstance(t.timeout, numbers.Real) or not float(t.timeout) > 0:
        raise InvalidParameterError("timeout", f"expected seconds > 0, got {t.timeout!r}")
    if t.registry is not None and not hasattr(t.registry, "artifacts"):
        raise InvalidParameterError(
            "registry", f"expected a dmlsearch Registry or None, got {t.registry!r}"
        )
    check_name("model_name", t.model_name)
    check_device_params(t.device, t.backend)
