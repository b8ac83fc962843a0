"""Checks on the driver before any rank runs: the trainer's parameters and its model."""

from __future__ import annotations

import collections
import difflib
import math
import numbers
import os
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import torch

from ..ensemble._common import check_bool
from ..exceptions import DmlsearchError, InvalidParameterError
from ..registry._checks import INT64_MAX, check_model_name, check_new_name
from ._data import head
from ._device import check_device_params
from ._trial import copied, materialize, try_batch

__all__ = [
    "SYNCS",
    "TRAINER_DEFAULTS",
    "check_int",
    "check_name",
    "check_params",
    "check_sync",
    "check_trainer_options",
    "diverged",
    "initial_model",
]

#: The synchronisation models ``sync`` accepts.
SYNCS = ("allreduce", "average", "ssp")
#: A torch estimator's data-parallel options (``trainer__<name>``), with their defaults.
TRAINER_DEFAULTS: dict[str, Any] = {
    "n_workers": 1,
    "client": None,
    "sync": "allreduce",
    "average_every": 1,
    "staleness": None,
}


def check_int(name: str, value: Any, low: int, *, none: bool = False) -> None:
    if none and value is None:
        return
    # Past int64 a count cannot reach the ranks (Dask's messages), torch or the registry.
    if (
        not isinstance(value, numbers.Integral)
        or isinstance(value, bool)
        or not low <= int(value) <= INT64_MAX
    ):
        extra = " or None" if none else ""
        raise InvalidParameterError(
            name, f"expected an int >= {low}{extra} (below 2**63), got {value!r}"
        )


def check_name(name: str, value: Any, what: str = "model name") -> None:
    """None, or a name the registry takes (checked before training, not after it)."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidParameterError(name, f"expected a non-empty {what} or None, got {value!r}")
    if value is not None:
        check = check_model_name if what == "model name" else check_new_name
        check(name, value, f"a {what}")


def check_sync(sync: Any, staleness: Any, prefix: str = "") -> None:
    """``sync`` one of :data:`SYNCS` (exactly: ``"AllReduce"`` is refused with a hint)."""
    if not isinstance(sync, str) or sync not in SYNCS:
        close = difflib.get_close_matches(str(sync).strip().lower(), SYNCS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidParameterError(
            f"{prefix}sync", f"unknown {sync!r}{hint} (one of {', '.join(SYNCS)})"
        )
    check_int(f"{prefix}staleness", staleness, 0, none=True)


def _check_sync_options(trainer: Any) -> None:
    """An option of another synchronisation model than ``sync`` would be ignored: refused.

    (A torch estimator's ``trainer__`` options are not checked so: a search space may pair
    ``trainer__average_every`` with several ``trainer__sync`` choices.)"""
    for option, owner, default in (("average_every", "average", 1), ("staleness", "ssp", None)):
        value = getattr(trainer, option)
        if trainer.sync != owner and value != default:
            raise InvalidParameterError(
                option,
                f"{option}={value!r} is used only with sync={owner!r}, and sync="
                f"{trainer.sync!r} would ignore it: set sync={owner!r}, or leave {option} "
                f"at {default!r}",
            )


def check_trainer_options(given: dict[str, Any]) -> dict[str, Any]:
    """A torch estimator's ``trainer__*`` options with their defaults, or
    InvalidParameterError naming the bad one."""
    from distributed import Client

    unknown = sorted(set(given) - set(TRAINER_DEFAULTS))
    if unknown:
        known = ", ".join(f"trainer__{k}" for k in TRAINER_DEFAULTS)
        raise InvalidParameterError(
            f"trainer__{unknown[0]}", f"unknown data-parallel option (known: {known})"
        )
    options = {**TRAINER_DEFAULTS, **given}
    check_sync(options["sync"], options["staleness"], "trainer__")
    check_int("trainer__n_workers", options["n_workers"], 1)
    check_int("trainer__average_every", options["average_every"], 1)
    client = options["client"]
    if not (client is None or isinstance(client, (str, Client))):
        raise InvalidParameterError(
            "trainer__client",
            "expected None (the current Dask client), a scheduler address or a "
            f"distributed.Client, got {type(client).__name__}",
        )
    return options


def check_params(trainer: Any) -> None:
    """Every parameter of a trainer, before anything runs (``InvalidParameterError``)."""
    for name in ("model_fn", "loss_fn", "optimizer_fn"):
        if not callable(getattr(trainer, name)):
            raise InvalidParameterError(
                name, f"expected a callable, got {getattr(trainer, name)!r}"
            )
    check_int("epochs", trainer.epochs, 1)
    check_int("batch_size", trainer.batch_size, 1)
    check_int("n_workers", trainer.n_workers, 1)
    check_int("average_every", trainer.average_every, 1)
    check_int("checkpoint_every", trainer.checkpoint_every, 1, none=True)
    check_bool("shuffle", trainer.shuffle)
    check_bool("elastic", trainer.elastic)
    check_bool("resume", trainer.resume)
    if trainer.resume and (trainer.registry is None or trainer.experiment_name is None):
        raise InvalidParameterError(
            "resume", "resume=True needs the registry and the experiment_name of the job"
        )
    check_sync(trainer.sync, trainer.staleness)
    _check_sync_options(trainer)
    timeout = trainer.timeout
    fine = isinstance(timeout, numbers.Real) and not isinstance(timeout, bool)
    # torch takes the timeout as a timedelta: inf, NaN and past ~2.7 million years fail there.
    if not (fine and 0 < float(timeout) < timedelta.max.total_seconds()):
        raise InvalidParameterError("timeout", f"expected finite seconds > 0, got {timeout!r}")
    if trainer.registry is not None and not hasattr(trainer.registry, "artifacts"):
        raise InvalidParameterError(
            "registry", f"expected a dmlsearch Registry or None, got {trainer.registry!r}"
        )
    check_name("model_name", trainer.model_name)
    check_name("experiment_name", trainer.experiment_name, "experiment name")
    check_device_params(trainer.device, trainer.backend)


def _call(name: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``; what the user's function raises becomes InvalidParameterError(name)."""
    try:
        return fn(*args)
    except DmlsearchError:
        raise
    except Exception as exc:
        raise InvalidParameterError(name, f"{name} raised {type(exc).__name__}: {exc}") from exc


def initial_model(
    trainer: Any, seed: int, X: Any, y: Any, model: torch.nn.Module | None = None
) -> tuple[torch.nn.Module, tuple[str, str]]:
    """Build the model on the driver (seeded, a copy of what ``model_fn`` returns; or take
    ``model``, trained in place) and try it on a batch, before any rank runs; also the
    torch dtypes X and y are trained as (:func:`try_batch`)."""
    given = model is not None
    if model is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _call("model_fn", trainer.model_fn)
    if not isinstance(model, torch.nn.Module):
        raise InvalidParameterError(
            "model_fn", f"must return a torch.nn.Module, returned {type(model).__name__}"
        )
    if not given:
        # Trained into and kept as model_: a copy, so that a model_fn returning one module
        # of the caller's (lambda: net) leaves it as it is and every fit starts from it.
        copy = copied(model)  # None: one deepcopy cannot copy, trained as it is
        model = model if copy is None else copy
    if not any(p.requires_grad for p in model.parameters()):
        raise InvalidParameterError(
            "model_fn",
            f"the {type(model).__name__} it returns has no parameters to train (none, or all "
            "with requires_grad=False): give the module at least one trainable layer",
        )
    optimizer = _call("optimizer_fn", trainer.optimizer_fn, model.parameters())
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidParameterError(
            "optimizer_fn",
            f"must return a torch.optim.Optimizer, returned {type(optimizer).__name__}",
        )
    b = int(trainer.batch_size)
    xb = head(X, b)
    dtypes = try_batch(model, trainer.loss_fn, xb, head(y, b))
    materialize(model, xb, dtypes[0], seed)
    return model, dtypes


def diverged(losses: Iterable[tuple[Any, Any]]) -> str | None:
    """For a fit whose last epoch's loss is NaN or infinite, what to warn (the first epoch
    whose loss was not finite, and a hint); else None. ``losses``: (epoch, loss) pairs."""
    pairs = list(losses)

    def bad(loss: Any) -> bool:
        return loss is not None and not math.isfinite(float(loss))

    if not pairs or not bad(pairs[-1][1]):
        return None
    first = next(epoch for epoch, loss in pairs if bad(loss))
    return (
        f"the training loss was not finite from epoch {first} on ({pairs[-1][1]} in the last, "
        f"epoch {pairs[-1][0]}): training diverged and the weights are likely NaN or "
        "infinite; try a smaller learning rate (or check the loss and the data)"
    )


def check_own_processes(client: Any, workers: list[str]) -> None:
    """InvalidParameterError when a rank's worker shares its process with another worker.

    torch.distributed keeps one default process group per process: a second rank (of
    this job or of another gang) started in the same process fails at its rendezvous, and
    the failed group can abort the whole process. Workers of ``LocalCluster(processes=False)``
    (``Client(processes=False)``) are threads of one process.
    """
    try:  # every worker: another job's ranks may run beside these
        answers = client.run(os.getpid, on_error="return")
    except Exception:  # a worker leaving meanwhile: the gang's own watch reports a loss
        return
    pids = {w: pid for w, pid in answers.items() if isinstance(pid, int)}
    counts = collections.Counter(pids.values())
    shared = [w for w in workers if w in pids and counts[pids[w]] > 1]
    if shared:
        raise InvalidParameterError(
            "client",
            f"data-parallel training runs one torch.distributed rank per worker process, "
            f"and worker {shared[0]} shares its process with {counts[pids[shared[0]]] - 1} "
            "other worker(s) (a cluster started with processes=False?): start the cluster "
            "with processes=True (LocalCluster's default), or train with sync='ssp', which "
            "needs no process group",
        )
