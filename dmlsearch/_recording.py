"""How a search writes to the registry: one writer on the driver, batched, as trials end.

Workers never open the database. Outcomes are buffered on the driver and written in one
transaction per batch (at most every ``flush_seconds``, or when ``flush_size`` are
waiting), so a search on SQLite has a single writer however many workers it has.
"""

from __future__ import annotations

import importlib.metadata
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._evaluate import TrialOutcome
from .exceptions import InvalidParameterError
from .registry import AlreadyExistsError, NotFoundError, Registry, TrialRecord

__all__ = ["PriorRun", "SearchRecorder", "data_fingerprint"]

_PACKAGES = ("dmlsearch", "scikit-learn", "dask", "distributed", "optuna", "numpy", "pandas")


def data_fingerprint(X: Any, y: Any, groups: Any = None) -> str:
    """A deterministic hash of the training data (numpy, pandas and sparse inputs)."""
    from dask.base import tokenize

    return str(tokenize(X, y, groups))


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
    """Records one search's trials in an experiment of ``registry``."""

    def __init__(
        self,
        registry: Registry,
        name: str,
        *,
        metric: str,
        flush_seconds: float = 0.5,
        flush_size: int = 500,
        owns_registry: bool = False,
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
                self.store.set_experiment_status(exp.id, "running")
                done = self.store.get_trials(exp.id)
                return PriorRun(seed=int(exp.config["seed"]), trials=done)
        try:
            exp = self.store.create_experiment(
                self.name,
                config=config,
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
        self.store.set_experiment_status(exp.id, "running")
        return None

    def add(self, outcome: TrialOutcome) -> None:
        assert self.experiment_id is not None
        self._buffer.append(
            TrialRecord.from_outcome(self.experiment_id, outcome, metric=self.metric)
        )
        if len(self._buffer) >= self.flush_size:
            self.flush()

    def tick(self) -> None:
        if self._buffer and time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        if self._buffer and self.experiment_id is not None:
            self.store.record_trials(self.experiment_id, self._buffer)
            self._buffer = []
        self._last_flush = time.monotonic()

    def close(self, status: str) -> None:
        try:
            self.flush()
            if self.experiment_id is not None:
                self.store.set_experiment_status(self.experiment_id, status)
        finally:
            if self.owns_registry:
                self.registry.close()


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
