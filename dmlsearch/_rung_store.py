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

A store that fails (unreachable: each attempt may block for botocore's retries) is left
alone by the process that saw it fail, for the rest of the run or :data:`PAUSE_SECONDS`,
whichever ends first: copies are skipped (a promotion off the trial's worker refits), with
one warning line per process; the traceback is logged at debug level.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .exceptions import InvalidParameterError

__all__ = [
    "FOLDER",
    "PAUSE_SECONDS",
    "StateStore",
    "check_state_store",
    "collect_states",
    "state_store_for",
]

#: The folder of the copies under a registry's own folder of the artifact store.
FOLDER = "rung-states"
#: Seconds a process leaves a state store alone after it failed there (for one run).
PAUSE_SECONDS = 300.0

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
# (url, run folder) -> when this process last saw the store fail (time.monotonic()).
_FAILED: dict[tuple[str, str], float] = {}


def _store(url: str, folder: str, options: dict[str, Any] | None = None) -> Any:
    from .registry._store_cache import cached_store

    return cached_store(url, folder, options)


@dataclass(frozen=True)
class StateStore:
    """Where the workers of one run copy trials' fold models (part of its RungContext).

    ``url``: an fsspec location (the registry's artifact store, or a folder every worker
    can read); ``folder``: the run's folder under it. ``top``: the schedule's highest
    resource; nothing continues from a step there, so it is not copied.
    ``storage_options``: the filesystem's options (the registry's, for its store); they
    travel to the workers with the context, and are never shown (``repr``) nor logged.
    """

    url: str
    folder: str
    top: int
    storage_options: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def _artifacts(self) -> Any:
        return _store(self.url, self.folder, self.storage_options)

    @property
    def base(self) -> str:
        return str(self._artifacts.base)

    def _path(self, trial: int, resource: int) -> str:
        return f"{self.base}/{trial}-{resource}.pkl"

    def paused(self) -> bool:
        """Whether this process saw the store fail in this run, less than
        :data:`PAUSE_SECONDS` ago: it is not tried again until then."""
        key = (self.url, self.folder)
        with _LOCK:
            since = _FAILED.get(key)
            if since is not None and time.monotonic() - since >= PAUSE_SECONDS:
                del _FAILED[key]
                since = None
        return since is not None

    def _failed(self, doing: str, exc: Exception) -> None:
        """Leave the store alone in this process for a while; say so in one line."""
        with _LOCK:
            _FAILED[(self.url, self.folder)] = time.monotonic()
        reason = " ".join(str(exc).split()) or "no message"
        logger.warning(
            "could not %s the state store %s (%s: %s); this process leaves it alone for "
            "the rest of this search (at most %d minutes): no copies, so a promotion that "
            "runs off its trial's worker refits, and Registry.gc deletes what is left there",
            doing, self.url, type(exc).__name__, reason, PAUSE_SECONDS // 60,
        )  # fmt: skip
        logger.debug("the state store %s failed", self.url, exc_info=exc)

    def save(self, run: str, trial: int, resource: int, models: list[Any]) -> str | None:
        """Write a copy of ``trial``'s fold models at ``resource``; its sha256, or None.

        None where nothing continues from ``resource``, the store is paused in this
        process (:meth:`paused`) or the write failed (one warning; the search goes on, a
        later promotion of the trial off this worker refits).
        """
        if resource >= self.top or self.paused():
            return None
        try:
            # A Dask dependency; pickles classes defined in __main__ (by value), as Dask does.
            import cloudpickle  # type: ignore[import-untyped]

            data = cloudpickle.dumps(
                {"run": run, "trial": trial, "resource": resource, "models": models},
                protocol=pickle.HIGHEST_PROTOCOL,
            )
        except Exception as exc:  # this trial's models, not the store: keep copying others
            logger.warning("could not pickle trial %s's state: %s", trial, exc)
            logger.debug("trial %s's state cannot be pickled", trial, exc_info=exc)
            return None
        try:
            # Written aside, then moved: a reader never sees a partial file.
            self._artifacts._write(self._path(trial, resource), data)
        except Exception as exc:
            self._failed(f"copy trial {trial}'s state to", exc)
            return None
        return hashlib.sha256(data).hexdigest()

    def load(self, trial: int, resource: int, digest: str) -> list[Any] | None:
        """The fold models the copy ``digest`` holds, or None (missing, corrupt, not it,
        or the store paused or failing in this process)."""
        if self.paused():
            return None
        try:
            with self._artifacts.fs.open(self._path(trial, resource), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        except Exception as exc:
            self._failed(f"read trial {trial}'s state from", exc)
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
        """Delete the copies ``(trial, resource)`` (on the driver); how many there were
        (0 where the store is paused or failed: ``Registry.gc`` deletes them later)."""
        if self.paused():
            return 0
        fs = self._artifacts.fs
        paths = [self._path(t, r) for t, r in copies]
        try:
            present = [p for p in paths if fs.exists(p)]
            if present:
                fs.rm(present)
        except Exception as exc:
            self._failed("delete copies from", exc)
            return 0
        return len(present)

    def clear(self) -> int:
        """Delete the run's folder with every copy in it; how many copies there were
        (0 where the store is paused or failed: ``Registry.gc`` deletes them later)."""
        if self.paused():
            return 0
        fs = self._artifacts.fs
        try:
            if not fs.exists(self.base):
                return 0
            n = len(fs.ls(self.base, detail=False))
            fs.rm(self.base, recursive=True)
        except Exception as exc:
            self._failed("delete the copies of this search from", exc)
            return 0
        return n

    def present(self) -> list[str]:
        """The names of the copies in the run's folder (tests, diagnostics)."""
        fs = self._artifacts.fs
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
    from .registry.artifacts import check_location, unknown_protocol

    check_location(value, "state_store", "a state store")
    # Checked here, not left to the workers: they would only warn, at each copy.
    unknown = unknown_protocol(value)
    if unknown is not None:
        raise InvalidParameterError(
            "state_store",
            f"unknown fsspec protocol {unknown!r} in {value!r}: give a folder or an fsspec "
            "URL every worker can read and write (file://, s3://, gs://, az://, ...)",
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
        artifacts = registry.artifacts
        namespace = artifacts.namespace or "_"
        return StateStore(
            artifacts.url,
            f"{namespace}/{FOLDER}/{run}",
            top,
            storage_options=dict(getattr(artifacts, "storage_options", None) or {}) or None,
        )
    return StateStore(str(setting), f"{FOLDER}/{run}", top)


def collect_states(artifacts: Any, grace_seconds: float, dry_run: bool = False) -> list[str]:
    """Delete the run folders of copies in ``artifacts`` (an ArtifactStore) that no run
    wrote to for ``grace_seconds`` (a crashed run's: a live one writes a copy every step,
    and its trials waiting for a promotion keep theirs); the paths of the copies deleted
    (or, with ``dry_run``, that would be)."""
    with artifacts._failing(artifacts._write_error, "delete the state copies crashed runs left"):
        return _collect_states(artifacts, grace_seconds, dry_run)


def _collect_states(artifacts: Any, grace_seconds: float, dry_run: bool) -> list[str]:
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
