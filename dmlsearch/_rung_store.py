"""Copies of multi-fidelity trials' fold models where any worker can read them.

A worker that finishes a rung step keeps the trial's fold models in its own memory
(:mod:`dmlsearch._rungs`); with a state store it also writes a copy, from the worker, to
a per-run folder of an fsspec filesystem: the registry's artifact store by default, at
``<store>/<registry id>/rung-states/<run>/<trial>-<resource>.pkl``. The step's result
carries only the copy's sha256; the driver hands it to the trial's next step, so a
promotion that runs on a worker without the models in memory (its holder died, or Dask
ran it elsewhere) reads the copy, checks it against the sha256, and continues from it
instead of refitting. A missing or corrupt copy refits, as before.

The driver deletes a copy once the trial has moved on (its next step finished) or the
scheduler gives the trial up, and the run's folder at the end of the run; these are
deletes, the bytes never pass through the driver. A crashed run leaves its folder:
:meth:`dmlsearch.Registry.gc` deletes copies older than its grace period
(:func:`collect_states`). Worker processes import this module: no Dask at module level.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .exceptions import InvalidParameterError

__all__ = ["FOLDER", "StateStore", "check_state_store", "collect_states", "state_store_for"]

#: The folder of the copies under a registry's own folder of the artifact store.
FOLDER = "rung-states"

logger = logging.getLogger(__name__)


@lru_cache(maxsize=8)
def _store(url: str, folder: str) -> Any:
    from .registry.artifacts import ArtifactStore

    return ArtifactStore(url, namespace=folder)


@dataclass(frozen=True)
class StateStore:
    """Where the workers of one run copy trials' fold models (part of its RungContext).

    ``url``: an fsspec location (the registry's artifact store, or a folder every worker
    can read); ``folder``: the run's folder under it. ``top``: the schedule's highest
    resource; nothing continues from a step there, so it is not copied.
    """

    url: str
    folder: str
    top: int

    @property
    def base(self) -> str:
        return str(_store(self.url, self.folder).base)

    def _path(self, trial: int, resource: int) -> str:
        return f"{self.base}/{trial}-{resource}.pkl"

    def save(self, run: str, trial: int, resource: int, models: list[Any]) -> str | None:
        """Write a copy of ``trial``'s fold models at ``resource``; its sha256, or None.

        None where nothing continues from ``resource`` or the write failed (logged: the
        search goes on, a later promotion of the trial off this worker refits).
        """
        if resource >= self.top:
            return None
        try:
            # A Dask dependency; pickles classes defined in __main__ (by value), as Dask does.
            import cloudpickle  # type: ignore[import-untyped]

            data = cloudpickle.dumps(
                {"run": run, "trial": trial, "resource": resource, "models": models},
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            # Written aside, then moved: a reader never sees a partial file.
            _store(self.url, self.folder)._write(self._path(trial, resource), data)
        except Exception:
            logger.warning("could not copy trial %s's state to %s", trial, self.url, exc_info=True)
            return None
        return hashlib.sha256(data).hexdigest()

    def load(self, trial: int, resource: int, digest: str) -> list[Any] | None:
        """The fold models the copy ``digest`` holds, or None (missing, corrupt, not it)."""
        fs = _store(self.url, self.folder).fs
        try:
            with fs.open(self._path(trial, resource), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            logger.warning("trial %s's state copy does not match its sha256: refitting", trial)
            return None
        payload = pickle.loads(data)
        if payload.get("trial") != trial or payload.get("resource") != resource:
            return None
        models: list[Any] = payload["models"]
        return models

    def delete(self, copies: list[tuple[int, int]]) -> int:
        """Delete the copies ``(trial, resource)`` (on the driver); how many there were."""
        fs = _store(self.url, self.folder).fs
        paths = [self._path(t, r) for t, r in copies]
        present = [p for p in paths if fs.exists(p)]
        if present:
            fs.rm(present)
        return len(present)

    def clear(self) -> int:
        """Delete the run's folder with every copy in it; how many copies there were."""
        fs = _store(self.url, self.folder).fs
        if not fs.exists(self.base):
            return 0
        n = len(fs.ls(self.base, detail=False))
        fs.rm(self.base, recursive=True)
        return n

    def present(self) -> list[str]:
        """The names of the copies in the run's folder (tests, diagnostics)."""
        fs = _store(self.url, self.folder).fs
        if not fs.exists(self.base):
            return []
        return sorted(str(p).rsplit("/", 1)[-1] for p in fs.ls(self.base, detail=False))


def check_state_store(value: Any) -> None:
    """Raise InvalidParameterError unless ``value`` is a valid ``SearchCV.state_store``."""
    if value is False or value is None or value == "auto":
        return
    if not isinstance(value, str) or not value.strip():
        raise InvalidParameterError(
            "state_store",
            f"must be 'auto', False or a path/fsspec URL every worker can read, got {value!r}",
        )


def state_store_for(
    setting: Any, registry: Any, run: str, top: int, resource: str
) -> StateStore | None:
    """The state store of a run: ``setting`` is ``SearchCV.state_store`` (checked)."""
    if setting is False or setting is None or resource == "n_samples":
        return None  # n_samples refits every step: there is nothing to continue
    if setting == "auto":
        if registry is None:
            return None
        namespace = registry.artifacts.namespace or "_"
        return StateStore(registry.artifacts.url, f"{namespace}/{FOLDER}/{run}", top)
    return StateStore(str(setting), f"{FOLDER}/{run}", top)


def collect_states(artifacts: Any, grace_seconds: float, dry_run: bool = False) -> list[str]:
    """Delete the run folders of copies in ``artifacts`` (an ArtifactStore) that no run
    wrote to for ``grace_seconds`` (a crashed run's: a live one writes a copy every step,
    and its trials waiting for a promotion keep theirs); the paths of the copies deleted
    (or, with ``dry_run``, that would be)."""
    fs = artifacts.fs
    root = f"{artifacts.base}/{FOLDER}"
    if not fs.exists(root):
        return []
    now = time.time()
    removed = []
    for folder in sorted(fs.ls(root, detail=False)):
        files = sorted(fs.find(folder))
        ages = [artifacts._age(path, now) for path in files]
        if grace_seconds > 0 and any(age is None or age < grace_seconds for age in ages):
            continue  # written lately (or of unknown age): a live run's
        if not dry_run:
            try:
                fs.rm(folder, recursive=True)
            except FileNotFoundError:
                continue
        removed += [artifacts.show(path) for path in files]
    return removed
