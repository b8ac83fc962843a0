"""What runs on a worker: fit and score candidates over the CV splits.

Nothing here imports Dask at module level; the runner ships these functions to workers
with the dataset and the context as (scattered) futures, never in a closure.
"""

from __future__ import annotations

import ctypes
import random
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
from sklearn.base import clone
from sklearn.utils.metaestimators import _safe_split

from ._oof import OofAssembler, OofRef, OofSink
from ._scoring import score_fold
from ._states import COMPLETE, FAILED, STOPPED, TIMEOUT
from .exceptions import TrialTimeoutError

__all__ = [
    "EvalContext",
    "SearchData",
    "TrialOutcome",
    "TrialSpec",
    "run_trials",
]

__all__ += ["COMPLETE", "FAILED", "STOPPED", "TIMEOUT"]


@dataclass
class SearchData:
    """The dataset of one search; scattered to the cluster once."""

    X: Any
    y: Any
    fit_params: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalContext:
    """Everything a trial needs besides the data and its own parameters; scattered once."""

    estimator: Any
    scorer: Callable[..., Any]
    multimetric: bool
    splits: list[tuple[np.ndarray, np.ndarray]]
    error_score: Any = np.nan
    return_train_score: bool = False
    seed_globals: bool = True
    trial_timeout: float | None = None
    #: Where to keep each trial's out-of-fold predictions (``keep_oof``), or None.
    oof: OofSink | None = None
    #: Whether the scorer gets the folds' rows of ``fit_params["sample_weight"]``.
    score_weight: bool = False


@dataclass(frozen=True)
class TrialSpec:
    number: int
    params: dict[str, Any]
    seed: int


@dataclass
class TrialOutcome:
    """The result of one trial, as recorded by the driver."""

    number: int
    params: dict[str, Any]
    seed: int
    state: str
    test_scores: list[dict[str, float]]
    train_scores: list[dict[str, float]] | None
    fit_times: list[float]
    score_times: list[float]
    started: float
    finished: float
    worker: str
    error: str | None = None
    retries: int = 0
    #: Where the trial's out-of-fold predictions are (``keep_oof=True``), else None.
    oof: OofRef | None = None
    #: Why a trial that ran with ``keep_oof=True`` has none (its scores stand), else None.
    oof_error: str | None = None

    @property
    def duration(self) -> float:
        return self.finished - self.started


def _index_fit_params(
    fit_params: Mapping[str, Any], n_samples: int, indices: np.ndarray
) -> dict[str, Any]:
    """Slice per-sample fit parameters (sample_weight, ...) to the training rows."""
    from sklearn.utils import _safe_indexing

    out = {}
    for key, value in fit_params.items():
        length = None
        if hasattr(value, "shape") and len(getattr(value, "shape", ())) > 0:
            length = value.shape[0]
        elif isinstance(value, (list, tuple)):
            length = len(value)
        out[key] = _safe_indexing(value, indices) if length == n_samples else value
    return out


def _num_samples(X: Any) -> int:
    if hasattr(X, "shape") and len(X.shape) > 0:
        return int(X.shape[0])
    return len(X)


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = [ctypes.c_ulong, ctypes.py_object]


@contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise TrialTimeoutError in this thread once ``seconds`` have passed.

    The exception is delivered between Python bytecodes, so a long C call finishes its
    current step first; the runner's hard deadline (restarting the worker) covers that.
    """
    if seconds is None:
        yield
        return
    ident = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                _set_async_exc(ident, ctypes.py_object(TrialTimeoutError))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            # Clear an exception that fired but was not yet delivered.
            _set_async_exc(ident, ctypes.py_object())


def _error_scores(context: EvalContext, names: list[str]) -> dict[str, float]:
    return {name: float(context.error_score) for name in names}


@dataclass
class _Fold:
    fit_time: float = 0.0
    score_time: float = 0.0
    test: dict[str, float] = field(default_factory=dict)
    train: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def _run_fold(
    data: SearchData,
    context: EvalContext,
    spec: TrialSpec,
    n_samples: int,
    train: np.ndarray,
    test: np.ndarray,
    oof: OofAssembler | None = None,
) -> _Fold:
    """Fit and score one split.

    A function of its own so that the fold's copies of the data are freed when it returns,
    before the next split is indexed (a loop body would hold two folds at the peak).
    """
    estimator = clone(context.estimator)
    estimator.set_params(**clone(spec.params, safe=False))
    X_train, y_train = _safe_split(estimator, data.X, data.y, train)
    X_test, y_test = _safe_split(estimator, data.X, data.y, test, train)
    fit_params = _index_fit_params(data.fit_params, n_samples, train)
    fold = _Fold()
    t0 = time.perf_counter()
    try:
        estimator.fit(X_train, y_train, **fit_params)
    except TrialTimeoutError:
        raise
    except (Exception, SystemExit) as exc:  # sys.exit in a fit must not end the worker
        if context.error_score == "raise":
            reraise(exc)
        fold.fit_time = time.perf_counter() - t0
        fold.error = traceback.format_exc()
        return fold
    fold.fit_time = time.perf_counter() - t0
    t1 = time.perf_counter()
    fold.test, fold.train, fold.error = score_fold(
        context.scorer,
        context.multimetric,
        context.error_score,
        estimator,
        (X_test, y_test, score_weight(context, data, n_samples, test)),
        (X_train, y_train, score_weight(context, data, n_samples, train))
        if context.return_train_score
        else None,
    )
    if fold.error is None and oof is not None and oof.error is None:
        try:
            oof.add(estimator, X_test, test)
        except TrialTimeoutError:
            raise
        except Exception:
            # Only the predictions are lost: the trial's scores are what keep_oof=False
            # gives (its docs promise the same trials).
            oof.error = traceback.format_exc()
    fold.score_time = time.perf_counter() - t1
    return fold


def reraise(exc: BaseException) -> NoReturn:
    """Raise ``exc`` from an estimator again; a ``SystemExit`` as a RuntimeError, which
    reaches the driver (raised on a worker, it would end the worker process)."""
    if isinstance(exc, SystemExit):
        raise RuntimeError(f"the estimator called sys.exit({exc.code!r})") from exc
    raise exc


def score_weight(context: EvalContext, data: SearchData, n_samples: int, rows: Any) -> Any:
    """The ``sample_weight`` of ``rows`` that the scorer takes, or None (see
    :func:`~dmlsearch._scoring.scorer_takes_weight`)."""
    if not context.score_weight:
        return None
    weight = {"sample_weight": data.fit_params["sample_weight"]}
    return _index_fit_params(weight, n_samples, rows)["sample_weight"]


def run_limit(timeout: float | None, stop_by: float | None) -> tuple[float | None, bool]:
    """Seconds a trial may run (its ``timeout``, or less where the time budget ends at
    ``stop_by`` first), and whether the time budget (not the timeout) binds."""
    if stop_by is None:
        return timeout, False
    left = max(stop_by - time.time(), 0.0)
    if timeout is None or left < timeout:
        return left, True
    return timeout, False


def run_trial(
    data: SearchData,
    context: EvalContext,
    spec: TrialSpec,
    worker: str,
    stop_by: float | None = None,
) -> TrialOutcome:
    """Fit and score one candidate on every split; stop at ``stop_by`` (wall clock)."""
    if context.seed_globals:
        # Estimators with random_state=None draw from these; seeding them per trial makes
        # results independent of which worker (and which earlier trials) ran before. The
        # generators are process-wide: this holds on workers with one thread each.
        np.random.seed(spec.seed % (2**32))
        random.seed(spec.seed)
    started = time.time()
    n_samples = _num_samples(data.X)
    test_scores: list[dict[str, float]] = []
    train_scores: list[dict[str, float]] | None = [] if context.return_train_score else None
    fit_times: list[float] = []
    score_times: list[float] = []
    error: str | None = None
    state = COMPLETE
    seconds, by_budget = run_limit(context.trial_timeout, stop_by)
    oof = None if context.oof is None else OofAssembler(context.oof)
    oof_ref: OofRef | None = None
    try:
        with _deadline(seconds):
            for train, test in context.splits:
                fold = _run_fold(data, context, spec, n_samples, train, test, oof)
                fit_times.append(fold.fit_time)
                score_times.append(fold.score_time)
                test_scores.append(fold.test)
                if train_scores is not None:
                    train_scores.append(fold.train)
                if fold.error is not None:
                    state = FAILED
                    error = error or fold.error
            if oof is not None and state == COMPLETE and oof.error is None:
                oof_ref, oof.error = _store_oof(oof, spec.number, worker)
    except TrialTimeoutError:
        if by_budget:
            state = STOPPED
            error = f"trial {spec.number} was still running when the time budget ran out"
        else:
            state = TIMEOUT
            error = (
                f"TrialTimeoutError: trial {spec.number} ran past trial_timeout="
                f"{context.trial_timeout}s and was stopped"
            )
        n = len(context.splits)
        test_scores = [{} for _ in range(n)]
        train_scores = [{} for _ in range(n)] if context.return_train_score else None
        fit_times = (fit_times + [0.0] * n)[:n]
        score_times = (score_times + [0.0] * n)[:n]
    finished = time.time()
    return TrialOutcome(
        number=spec.number,
        params=spec.params,
        seed=spec.seed,
        state=state,
        test_scores=test_scores,
        train_scores=train_scores,
        fit_times=fit_times,
        score_times=score_times,
        started=started,
        finished=finished,
        worker=worker,
        error=error,
        oof=oof_ref,
        oof_error=None if oof is None or state != COMPLETE else oof.error,
    )


def _store_oof(oof: OofAssembler, number: int, worker: str) -> tuple[OofRef | None, str | None]:
    try:
        return oof.store(number, worker), None
    except TrialTimeoutError:
        raise
    except Exception:
        return (
            None,
            f"keep_oof: storing the out-of-fold predictions failed:\n{traceback.format_exc()}",
        )


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "local"


_quiet_lock = threading.Lock()
_quiet_depth = 0
_saved_filters: Any = None


@contextmanager
def _quiet_warnings() -> Iterator[None]:
    """Ignore warnings while any trial runs in this process, and restore them after the last.

    ``warnings.catch_warnings`` saves and restores the process-wide filters, so two
    threads of one worker nesting it out of order would leave the filters wrong; a count
    shared by the threads restores them once, when the last trial of the process ends.
    """
    global _quiet_depth, _saved_filters
    with _quiet_lock:
        if _quiet_depth == 0:
            _saved_filters = warnings.filters[:]
            # Estimator warnings (convergence, ...) would flood worker logs; sklearn's
            # search does not surface them either.
            warnings.simplefilter("ignore")
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                warnings.filters[:] = _saved_filters  # type: ignore[index]
                warnings._filters_mutated()  # type: ignore[attr-defined]
                _saved_filters = None


def run_trials(
    data: SearchData,
    context: EvalContext,
    specs: list[TrialSpec],
    start_by: float | None = None,
    stop_by: float | None = None,
) -> list[TrialOutcome]:
    """Run a batch of trials in order; the unit of work the runner submits.

    No trial starts after ``start_by`` (wall clock): those are left out of the result.
    A trial running at ``stop_by`` is stopped and recorded ``"stopped"``.
    """
    worker = _worker_name()
    outcomes: list[TrialOutcome] = []
    with _quiet_warnings():
        for spec in specs:
            if start_by is not None and time.time() >= start_by:
                break
            outcomes.append(run_trial(data, context, spec, worker, stop_by))
    return outcomes
