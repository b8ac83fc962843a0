"""A worker's state cache for multi-fidelity searches: the fold models of each trial.

Kept in the worker's process, keyed by worker address (so in-process workers sharing
this module keep apart) and by ``(run, trial)``. A rung step takes a trial's models out
(:func:`take`) and puts the trained ones back (:func:`put`); the driver drops a run's
entries with :func:`drop_states` through ``client.run``: the trials the scheduler will not
continue as the search goes, and everything of the run at its end (its folds' xgboost
matrices and rows too). A worker that dies takes its states with it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ._evaluate import _worker_name
from ._xgb_matrices import drop_run

__all__ = ["Held", "drop_states", "held_states", "put", "take"]


@dataclass
class Held:
    """A trial's fold models, trained to ``resource``."""

    resource: int
    models: list[Any] = field(default_factory=list)


_lock = threading.Lock()
#: worker address -> (run, trial) -> fold models trained to a resource.
_states: dict[str, dict[tuple[str, int], Held]] = {}


def take(worker: str, run: str, trial: int) -> Held | None:
    """The trial's models held for ``worker``, out of the cache (None: none held)."""
    with _lock:
        return _states.get(worker, {}).pop((run, trial), None)


def put(worker: str, run: str, trial: int, held: Held) -> None:
    """Keep ``held`` as the trial's models for ``worker`` (replacing what it had)."""
    with _lock:
        _states.setdefault(worker, {})[(run, trial)] = held


def drop_states(run: str, trials: list[int] | None = None, dask_worker: Any = None) -> int:
    """Forget run ``run``'s states of ``trials`` (all of the run's if None) on this worker.

    Called through ``client.run``; returns how many were dropped.
    """
    address = str(dask_worker.address) if dask_worker is not None else _worker_name()
    wanted = None if trials is None else set(trials)
    with _lock:
        held = _states.get(address, {})
        gone = [k for k in held if k[0] == run and (wanted is None or k[1] in wanted)]
        for key in gone:
            del held[key]
    if trials is None:  # the run is over: its folds' matrices and rows go too
        drop_run(run)
    return len(gone)


def held_states(run: str | None = None, dask_worker: Any = None) -> list[int]:
    """The trials whose state this worker holds (of ``run``, or of every run)."""
    address = str(dask_worker.address) if dask_worker is not None else _worker_name()
    with _lock:
        return sorted(t for r, t in _states.get(address, {}) if run is None or r == run)
