"""How a search writes to the registry: one writer on the driver, batched, as trials end.

Workers never open the database. Outcomes are buffered on the driver and written in one
transaction per batch (at most every ``flush_seconds``, or when ``flush_size`` are
waiting), so a search on SQLite has a single writer however many workers it has.

A registry that is briefly unavailable (a lost connection, a SQLite file locked past its
busy timeout) does not end a search: the trials stay buffered and the write is tried again
with backoff while the search runs; the final write waits for at most ``retry_seconds``.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import math
import os
import random
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ._evaluate import TrialOutcome
from ._search_support import ending
from ._space_values import same_repr
from .exceptions import InvalidParameterError
from .registry import (
    AlreadyExistsError,
    ExperimentDeletedError,
    FormatError,
    ModelVersionRecord,
    NotFoundError,
    Registry,
    RegistryError,
    RegistryUnavailableError,
    TrialRecord,
)
from .registry.formats import dump_model

__all__ = ["PriorRun", "SearchRecorder", "data_fingerprint"]

logger = logging.getLogger("dmlsearch")

_T = TypeVar("_T")
# Seconds between attempts at an unavailable registry: doubling from the first, up to the cap.
_FIRST_BACKOFF = 0.5
_MAX_BACKOFF = 15.0

#: Recorded with every experiment when installed (a package absent here is left out).
_PACKAGES = (
    "dmlsearch",
    "scikit-learn",
    "dask",
    "distributed",
    "optuna",
    "numpy",
    "pandas",
    "xgboost",
    "torch",
    "skorch",
)


def data_fingerprint(X: Any, y: Any, groups: Any = None) -> str:
    """A deterministic hash of the training data (numpy, pandas and sparse inputs)."""
    from dask.base import tokenize

    return str(tokenize(X, y, groups))


def driver_stamp() -> dict[str, Any]:
    """The driver running an experiment now, as its ``config["driver"]`` records it: this
    host and process, and when it opened the experiment (read when another resume asks
    whether the experiment is in use: :func:`dmlsearch._experiment.check_not_running`)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "opened": time.time()}


def package_versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


@dataclass
class PriorRun:
    """What an interrupted run of the same experiment already finished."""

    seed: int
    trials: list[TrialRecord] = field(default_factory=list)

    @property
    def numbers(self) -> set[int]:
        return {t.number for t in self.trials}


class SearchRecorder:
    """Records one search's trials in an experiment of ``registry``.

    Writes made while trials run (:meth:`add`, :meth:`tick`) never raise for an unavailable
    registry: the trials stay buffered and are written at a later tick, attempts spaced by
    a backoff from 0.5 s up to 15 s, each failure logged as a warning. :meth:`flush` and
    :meth:`register_model` retry for at most ``retry_seconds`` before raising
    RegistryUnavailableError; :meth:`close` never raises (it logs, and warns after a search
    that completed).
    """

    def __init__(
        self,
        registry: Registry,
        name: str,
        *,
        metric: str,
        flush_seconds: float = 0.5,
        flush_size: int = 500,
        owns_registry: bool = False,
        retry_seconds: float = 60.0,
    ) -> None:
        self.registry = registry
        # A registry opened from a URL for this search is closed with it.
        self.owns_registry = owns_registry
        self.store = registry.store
        self.name = name
        self.metric = metric
        self.flush_seconds = flush_seconds
        self.flush_size = flush_size
        self._buffer: list[TrialRecord] = []
        self._last_flush = time.monotonic()
        self.experiment_id: int | None = None
        self.created = False  # by this run (not a resume)
        self.retry_seconds = retry_seconds
        # Outage state: when it began, the next attempt's time and the current backoff.
        self._outage_since: float | None = None
        self._next_attempt = 0.0
        self._backoff = _FIRST_BACKOFF

    def open(
        self,
        *,
        resume: bool,
        config: dict[str, Any],
        fingerprint: str,
        cluster: dict[str, Any],
    ) -> PriorRun | None:
        """Create the experiment (or find it, when resuming); returns what was done before."""
        if resume:
            try:
                exp = self.store.get_experiment(self.name)
            except NotFoundError:
                exp = None
            if exp is not None:
                if exp.data_fingerprint not in (None, fingerprint):
                    raise InvalidParameterError(
                        "resume",
                        f"the data differs from the data experiment {self.name!r} started "
                        "with; resume with the same X, y and groups, or start a new experiment",
                    )
                self.experiment_id = exp.id
                self.store.set_experiment_config(exp.id, {**exp.config, "driver": driver_stamp()})
                self.store.set_experiment_status(exp.id, "running")
                done = self.store.get_trials(exp.id)
                return PriorRun(seed=int(exp.config["seed"]), trials=done)
        try:
            exp = self.store.create_experiment(
                self.name,
                config={**config, "driver": driver_stamp()},
                package_versions=package_versions(),
                data_fingerprint=fingerprint,
                cluster=cluster,
            )
        except AlreadyExistsError:
            raise InvalidParameterError(
                "experiment_name",
                f"an experiment called {self.name!r} already exists; pass resume=True to "
                "continue it, or choose another name",
            ) from None
        self.experiment_id = exp.id
        self.created = True
        self.store.set_experiment_status(exp.id, "running")
        return None

    def ended_by(self, exc: BaseException) -> None:
        """Close after ``exc``. A refusal (InvalidParameterError) before any trial of an
        experiment this run created removes it: a record of nothing would only make the
        fixed run meet its name (``already exists``)."""
        if (
            isinstance(exc, InvalidParameterError)
            and self.created
            and not self._buffer
            and self.experiment_id is not None
        ):
            try:
                if self.store.count_trials(self.experiment_id) == 0:
                    self.store.delete_experiment(self.experiment_id)
                    self.experiment_id = None
            except Exception:  # the refusal is what the user must see
                logger.debug("dmlsearch: removing the refused experiment failed", exc_info=True)
        self.close(ending(exc))

    @property
    def pending(self) -> int:
        """Trials buffered and not yet written."""
        return len(self._buffer)

    def add(self, outcome: TrialOutcome, *, intermediate: dict[str, float] | None = None) -> None:
        """Buffer ``outcome``'s record; ``intermediate``: its scores by budget (rung steps)."""
        assert self.experiment_id is not None
        record = TrialRecord.from_outcome(self.experiment_id, outcome, metric=self.metric)
        if intermediate:
            record = dataclasses.replace(record, intermediate=dict(intermediate))
        self._buffer.append(record)
        if len(self._buffer) >= self.flush_size:
            self._write_if_due()

    def tick(self) -> None:
        if self._buffer and time.monotonic() - self._last_flush >= self.flush_seconds:
            self._write_if_due()

    def _write(self) -> None:
        """One attempt at writing the buffer (one transaction); it is kept if that fails."""
        if self._buffer and self.experiment_id is not None:
            try:
                self.store.record_trials(self.experiment_id, self._buffer)
            except NotFoundError:
                raise self._deleted() from None
            self._buffer = []
        self._last_flush = time.monotonic()
        if self._outage_since is not None:
            logger.warning(
                "dmlsearch: the registry is reachable again after %.1f s; buffered trials "
                "were written",
                time.monotonic() - self._outage_since,
            )
        self._outage_since = None
        self._backoff = _FIRST_BACKOFF

    def _deleted(self) -> ExperimentDeletedError:
        return ExperimentDeletedError(
            f"experiment {self.name!r} was deleted from the registry while this run recorded "
            "it (`dmlsearch delete --force`, `run --overwrite --force` or "
            "Registry.delete_experiment), so the run stopped: run it again to record it"
        )

    def _failed(self, exc: RegistryUnavailableError) -> float:
        """Note a failed attempt; return the delay before the next one."""
        now = time.monotonic()
        if self._outage_since is None:
            self._outage_since = now
        delay = random.uniform(0.5, 1.0) * self._backoff
        self._backoff = min(2 * self._backoff, _MAX_BACKOFF)
        self._next_attempt = now + delay
        logger.warning(
            "dmlsearch: %s; keeping %d trial(s) in memory and trying again in %.1f s",
            exc,
            len(self._buffer),
            delay,
        )
        return delay

    def _write_if_due(self) -> None:
        """Write the buffer unless an outage's backoff says wait; never raises for an outage."""
        if time.monotonic() < self._next_attempt:
            return
        try:
            self._write()
        except RegistryUnavailableError as exc:
            self._failed(exc)

    def _retrying(self, call: Callable[[], _T], deadline: float) -> _T:
        """``call()``, tried again with backoff while the registry is unavailable, until
        ``deadline`` (monotonic); then its RegistryUnavailableError is raised."""
        while True:
            try:
                result = call()
            except RegistryUnavailableError as exc:
                delay = self._failed(exc)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                time.sleep(min(delay, remaining))
                continue
            self._next_attempt = 0.0
            return result

    def flush(self, *, deadline: float | None = None) -> None:
        """Write every buffered trial, retrying an unavailable registry for at most
        ``retry_seconds`` (or until ``deadline``, monotonic); raises
        RegistryUnavailableError after that, with the trials still buffered."""
        if deadline is None:
            deadline = time.monotonic() + self.retry_seconds
        self._retrying(self._write, deadline)

    def register_model(self, model: Any, **kwargs: Any) -> ModelVersionRecord:
        """Register ``model`` as the next version of the model named after the experiment.

        ``kwargs`` go to :meth:`Registry.register_model` (``experiment`` is this one). An
        unavailable registry is retried for at most ``retry_seconds``; then, or for any
        other registry failure, a RegistryError is raised (FormatError for a model that has
        no safe format).
        """
        kwargs.setdefault("experiment", self.experiment_id)
        deadline = time.monotonic() + self.retry_seconds
        return self._retrying(
            lambda: self.registry.register_model(self.name, model, **kwargs), deadline
        )

    def registered(self, trial: int) -> ModelVersionRecord | None:
        """The latest version of the experiment's model, when this experiment registered it
        from trial ``trial`` (a resume that found no better trial): registering the refit
        again would only add a duplicate version. None when it did not (or the registry
        cannot say: then the model is registered as usual)."""
        try:
            latest = self.store.get_model_version(self.name)
        except (NotFoundError, RegistryError):
            return None
        lineage = latest.lineage
        if lineage.get("experiment_id") == self.experiment_id and lineage.get("trial") == trial:
            return latest
        return None

    def unregistered(self, model: Any, exc: Exception, trial: int) -> str:
        """The warning for a best model that :meth:`register_model` refused, with what to do.

        A search never pickles; where pickle could save the model the message gives the
        call that registers it (pickle runs code on load, so that is the user's choice).
        """
        message = f"best_estimator_ was not registered: {exc}"
        if not isinstance(exc, FormatError):
            return message
        try:
            dump_model(model, allow_pickle=True)
        except FormatError:
            return message  # its message already says what to change in the model
        return (
            f"{message}; a search never pickles, so register it yourself: "
            f"registry.register_model({self.name!r}, search.best_estimator_, "
            f"allow_pickle=True, experiment={self.name!r}, trial={trial})"
        )

    def close(self, status: str) -> None:
        """Write the buffered trials and the experiment's final ``status``; never raises.

        Called from a search's error path too, so it must not hide the error being raised:
        a failure here is logged (and, after a completed search, warned about) instead.
        """
        deadline = time.monotonic() + self.retry_seconds
        try:
            self.flush(deadline=deadline)
            if self.experiment_id is not None:
                experiment_id = self.experiment_id
                self._retrying(
                    lambda: self.store.set_experiment_status(experiment_id, status), deadline
                )
        except (ExperimentDeletedError, NotFoundError):
            # Nothing of it can be recorded any more; a failed run's own error says so.
            if status == "complete":
                warnings.warn(str(self._deleted()), RuntimeWarning, stacklevel=3)
        except Exception as exc:
            self._close_failed(status, exc)
        finally:
            if self.owns_registry:
                try:
                    self.registry.close()
                except Exception:
                    logger.warning("dmlsearch: closing the registry failed", exc_info=True)

    def _close_failed(self, status: str, exc: Exception) -> None:
        lost = (
            f"{len(self._buffer)} trial(s) and the status {status!r}"
            if self._buffer
            else f"the status {status!r}"
        )
        message = (
            f"experiment {self.name!r}: could not record {lost} in the registry ({exc}); "
            "they are in the search's results (cv_results_), and resume=True reruns the "
            "trials that were not recorded"
        )
        if status == "complete":
            warnings.warn(message, RuntimeWarning, stacklevel=3)
        logger.error("dmlsearch: %s", message, exc_info=exc)


def same_params(stored: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether ``params`` is what the registry holds as ``stored`` (after its JSON round trip)."""
    from .registry.sql import _dumps, _loads

    def equal(a: Any, b: Any) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return a == b or (math.isnan(a) and math.isnan(b))
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
        if isinstance(a, str) and isinstance(b, str):
            return same_repr(a, b)  # a function chosen: its repr's address is per process
        return bool(a == b)

    return equal(_loads(_dumps(stored)), _loads(_dumps(params)))


def outcome_from_record(
    record: TrialRecord, params: dict[str, Any], n_splits: int, return_train_score: bool
) -> TrialOutcome:
    """Rebuild a finished trial from the registry (fit/score times are not stored per fold)."""
    names = list(record.scores)
    test_scores = [
        {name: record.scores[name][k] for name in names if k < len(record.scores[name])}
        for k in range(n_splits)
    ]
    per_fold = (record.duration or 0.0) / max(n_splits, 1)
    return TrialOutcome(
        number=record.number,
        params=params,
        seed=int(record.seed or 0),
        state=record.state,
        test_scores=test_scores,
        train_scores=[{} for _ in range(n_splits)] if return_train_score else None,
        fit_times=[per_fold] * n_splits,
        score_times=[0.0] * n_splits,
        started=float(record.started or 0.0),
        finished=float(record.finished or 0.0),
        worker=record.worker or "",
        error=record.error,
        retries=record.retries,
    )


def input_signature(X: Any) -> dict[str, Any]:
    """What a registered model expects: feature count, names and dtypes where known."""
    signature: dict[str, Any] = {
        "n_features": int(X.shape[1]) if hasattr(X, "shape") and len(X.shape) > 1 else None
    }
    columns = getattr(X, "columns", None)
    if columns is not None:
        signature["feature_names"] = [str(c) for c in columns]
        signature["dtypes"] = [str(d) for d in getattr(X, "dtypes", [])]
    elif hasattr(X, "dtype"):
        signature["dtype"] = str(np.dtype(X.dtype))
    return signature
