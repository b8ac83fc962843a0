"""What runs on a worker for a multi-fidelity search: one rung step of one trial.

A rung step trains each CV fold's model of a trial up to a resource with
:mod:`dmlsearch.fidelity`, continuing from the fold models this worker holds for the
trial (its *state cache*) when they are at the step's ``from_resource``, else refitting
from scratch (and saying so in ``continued``). It scores every fold, keeps the fitted
fold models in the cache for a later promotion, and returns a small
:class:`RungResult`: the fitted state never goes to the driver.

The cache (:mod:`dmlsearch._rung_cache`) lives in the worker's process; the driver drops
a run's entries with :func:`drop_states` (``client.run``). With a state store
(:mod:`dmlsearch._rung_store`) the worker also writes a copy of the fold models where
every worker can read it, and a step whose state is not in its worker's cache continues
from that copy (``from_store``); without one (or without a valid copy) it refits from
scratch.
"""

from __future__ import annotations

import functools
import random
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.utils import _safe_indexing
from sklearn.utils.metaestimators import _safe_split

from ._evaluate import (
    EvalContext,
    SearchData,
    TrialOutcome,
    _deadline,
    _index_fit_params,
    _num_samples,
    _quiet_warnings,
    _worker_name,
    reraise,
    run_limit,
    score_weight,
)
from ._rung_cache import Held, drop_states, held_states, put, take
from ._rung_store import StateStore
from ._scoring import score_fold
from ._states import COMPLETE, FAILED, STOPPED, TIMEOUT
from ._xgb_matrices import cached_fold_rows, fold_rows_key
from .exceptions import TrialTimeoutError
from .fidelity import TrainStep, subsample, train_n_samples, train_param, train_partial_fit

__all__ = [
    "RungContext",
    "RungResult",
    "RungSpec",
    "drop_states",
    "held_states",
    "run_rung_steps",
]


@dataclass(frozen=True)
class RungSpec:
    """One rung step: train ``trial`` (``params``) to ``resource``, from ``from_resource``.

    ``rung`` is the scheduler's rung (its index within the trial's bracket; the step
    index for median stopping); ``from_resource`` is 0 for a trial's first step.
    ``state_copy``: the sha256 of the state store's copy of the trial at ``from_resource``
    (None: no copy).
    """

    trial: int
    params: dict[str, Any]
    seed: int
    rung: int
    resource: int
    from_resource: int = 0
    bracket: int = 0
    state_copy: str | None = None

    @property
    def id(self) -> tuple[int, int]:
        """Unique within a run: a trial reaches each resource at most once."""
        return (self.trial, self.resource)


@dataclass
class RungContext:
    """What every rung step of a run shares (scattered once): how to fit and score.

    ``run`` keys the worker caches; ``classes`` are the labels a classifier's first
    ``partial_fit`` call is given (all of ``y``'s, as a fold may miss one); ``store``:
    where workers copy the trials' states (None: nowhere).
    """

    evaluation: EvalContext
    resource: str
    run: str
    seed: int = 0
    classes: Any = None
    store: StateStore | None = None


@dataclass
class RungResult(TrialOutcome):
    """What a rung step gives back (a trial's outcome at one rung), never the models.

    ``number`` is the trial. ``work``: resource units actually trained in this step,
    summed over folds / number of folds (``TrainStep.work``). ``continued``: every fold
    continued from the trial's state (False: refitted from scratch, or a first step);
    ``from_store``: that state was the state store's copy, not this worker's cache.
    ``stored``: the worker kept the fold models for a promotion; ``state_copy``: the sha256 of
    the copy it wrote to the state store (None: none). ``store_time``: seconds spent
    reading and writing the state store.
    """

    rung: int = 0
    resource: int = 0
    from_resource: int = 0
    bracket: int = 0
    work: float = 0.0
    continued: bool = False
    stored: bool = False
    from_store: bool = False
    state_copy: str | None = None
    store_time: float = 0.0

    @property
    def trial(self) -> int:
        return self.number

    @property
    def id(self) -> tuple[int, int]:
        return (self.number, self.resource)

    @classmethod
    def of(
        cls, spec: RungSpec, state: str, n_splits: int, train: bool, **fields: Any
    ) -> RungResult:
        """A result of ``spec`` with empty scores (fields given override them)."""
        now = time.time()
        values: dict[str, Any] = {
            "test_scores": [{} for _ in range(n_splits)],
            "train_scores": [{} for _ in range(n_splits)] if train else None,
            "fit_times": [0.0] * n_splits,
            "score_times": [0.0] * n_splits,
            "started": now,
            "finished": now,
            "worker": "",
        }
        values.update(fields)
        return cls(
            number=spec.trial,
            params=spec.params,
            seed=spec.seed,
            state=state,
            rung=spec.rung,
            resource=spec.resource,
            from_resource=spec.from_resource,
            bracket=spec.bracket,
            **values,
        )


def _train_fold(
    context: RungContext,
    state: Any,
    X: Any,
    y: Any,
    spec: RungSpec,
    previous: int,
    fit_params: dict[str, Any],
    fold: int,
) -> TrainStep:
    if context.resource == "partial_fit":
        return train_partial_fit(
            state, X, y, spec.resource, previous, classes=context.classes, fit_params=fit_params
        )
    if context.resource == "n_samples":
        return train_n_samples(
            state, X, y, spec.resource, previous, seed=context.seed, fit_params=fit_params
        )
    return train_param(
        state,
        X,
        y,
        spec.resource,
        previous,
        param=context.resource,
        fit_params=fit_params,
        matrix_key=(context.run, fold),  # every trial of the run trains on these rows
        consume=previous > 0,  # a held state, taken out of the cache: trained on in place
    )


@dataclass
class _Step:
    test: list[dict[str, float]] = field(default_factory=list)
    train: list[dict[str, float]] = field(default_factory=list)
    fit_times: list[float] = field(default_factory=list)
    score_times: list[float] = field(default_factory=list)
    models: list[Any] = field(default_factory=list)
    work: int = 0
    continued: bool = True
    error: str | None = None


def _split(state: Any, data: SearchData, train: Any, test: Any) -> tuple[Any, ...]:
    X_train, y_train = _safe_split(state, data.X, data.y, train)
    X_test, y_test = _safe_split(state, data.X, data.y, test, train)
    return X_train, y_train, X_test, y_test


def _run_folds(data: SearchData, context: RungContext, spec: RungSpec, held: Held | None) -> _Step:
    ev = context.evaluation
    n_samples = _num_samples(data.X)
    out = _Step()
    # One unfitted model for every fold: training never changes an unfitted state (it
    # fits a clone of it), so the folds need no clone each.
    fresh = None
    if held is None:
        fresh = clone(ev.estimator).set_params(**clone(spec.params, safe=False))
    for k, (train, test) in enumerate(ev.splits):
        if held is not None:
            state, previous = held.models[k], held.resource
        else:
            state, previous = fresh, spec.from_resource
        X_train, y_train, X_test, y_test = cached_fold_rows(
            fold_rows_key(context.resource, state, (context.run, k)),
            functools.partial(_split, state, data, train, test),
        )
        fit_params = _index_fit_params(data.fit_params, n_samples, train)
        t0 = time.perf_counter()
        try:
            step = _train_fold(context, state, X_train, y_train, spec, previous, fit_params, k)
        except TrialTimeoutError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit in a fit must not end the worker
            if ev.error_score == "raise":
                reraise(exc)
            _fold_failed(out, traceback.format_exc(), time.perf_counter() - t0, 0.0)
            continue
        fit_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        test_scores, train_scores, error = score_fold(
            ev.scorer,
            ev.multimetric,
            ev.error_score,
            step.estimator,
            (X_test, y_test, score_weight(ev, data, n_samples, test)),
            _train_part(context, spec, data, (X_train, y_train), train)
            if ev.return_train_score
            else None,
        )
        if error is not None:
            _fold_failed(out, error, fit_time, time.perf_counter() - t1)
            continue
        out.fit_times.append(fit_time)
        out.score_times.append(time.perf_counter() - t1)
        out.test.append(test_scores)
        if ev.return_train_score:
            out.train.append(train_scores)
        out.work += step.work
        out.continued = out.continued and step.continued
        out.models.append(step.estimator)
    return out


def _train_part(
    context: RungContext, spec: RungSpec, data: SearchData, rows: tuple[Any, Any], train: Any
) -> tuple[Any, Any, Any]:
    """What a train score scores: the rows the model was trained on (with
    ``resource='n_samples'`` its subsample of the fold, as scikit-learn's Halving searches)."""
    X_train, y_train = rows
    ev = context.evaluation
    if context.resource == "n_samples":
        kept = subsample(len(train), spec.resource, context.seed)
        X_train = _safe_indexing(X_train, kept)
        y_train = None if y_train is None else _safe_indexing(y_train, kept)
        train = np.asarray(train)[kept]
    return X_train, y_train, score_weight(ev, data, _num_samples(data.X), train)


def _fold_failed(out: _Step, error: str, fit_time: float, score_time: float) -> None:
    out.error = out.error or error
    out.fit_times.append(fit_time)
    out.score_times.append(score_time)
    out.test.append({})
    out.train.append({})


def run_rung_step(
    data: SearchData,
    context: RungContext,
    spec: RungSpec,
    worker: str,
    stop_by: float | None = None,
) -> RungResult:
    """Train and score one trial's fold models up to ``spec.resource``; stop at ``stop_by``."""
    ev = context.evaluation
    if ev.seed_globals:
        # As run_trial: estimators with random_state=None draw from these.
        step_seed = int(
            np.random.SeedSequence(spec.seed, spawn_key=(spec.resource,)).generate_state(1)[0]
        )
        np.random.seed(step_seed)
        random.seed(step_seed)
    started = time.time()
    held, from_store, store_time = _held_state(context, spec, worker)
    n = len(ev.splits)
    state, error = COMPLETE, None
    seconds, by_budget = run_limit(ev.trial_timeout, stop_by)
    try:
        with _deadline(seconds):
            step = _run_folds(data, context, spec, held)
        if step.error is not None:
            state, error = FAILED, step.error
    except TrialTimeoutError:
        step = _Step(test=[{} for _ in range(n)], train=[{} for _ in range(n)])
        step.fit_times = step.score_times = [0.0] * n
        step.continued = False
        if by_budget:
            state = STOPPED
            error = f"trial {spec.trial} was still running when the time budget ran out"
        else:
            state = TIMEOUT
            error = (
                f"TrialTimeoutError: trial {spec.trial} (resource {spec.resource}) ran past "
                f"trial_timeout={ev.trial_timeout}s and was stopped"
            )
    stored, copy = False, None
    if state == COMPLETE and context.resource != "n_samples":
        # n_samples refits every step: its models are never continued, so not kept.
        put(worker, context.run, spec.trial, Held(spec.resource, step.models))
        stored = True
        if context.store is not None:
            t0 = time.perf_counter()
            copy = context.store.save(context.run, spec.trial, spec.resource, step.models)
            store_time += time.perf_counter() - t0
    return RungResult.of(
        spec,
        state,
        n,
        ev.return_train_score,
        test_scores=step.test,
        train_scores=step.train if ev.return_train_score else None,
        fit_times=step.fit_times,
        score_times=step.score_times,
        started=started,
        finished=time.time(),
        worker=worker,
        work=step.work / n,
        continued=held is not None and step.continued,
        stored=stored,
        from_store=from_store and step.continued,
        state_copy=copy,
        store_time=store_time,
        error=error,
    )


def _held_state(
    context: RungContext, spec: RungSpec, worker: str
) -> tuple[Held | None, bool, float]:
    """The trial's state at ``spec.from_resource``: this worker's, else the store's copy.

    Returns ``(state or None, whether it came from the store, seconds reading it)``.
    """
    if spec.from_resource == 0:
        return None, False, 0.0
    n = len(context.evaluation.splits)
    held = take(worker, context.run, spec.trial)
    if held is not None and held.resource == spec.from_resource and len(held.models) == n:
        return held, False, 0.0
    if context.store is None or spec.state_copy is None:
        return None, False, 0.0
    t0 = time.perf_counter()
    try:
        models = context.store.load(spec.trial, spec.from_resource, spec.state_copy)
    except TrialTimeoutError:
        raise  # the step's deadline, fired during the read: the step stops
    except Exception:  # unreadable (a store gone, a class renamed): refit, as without one
        models = None
    seconds = time.perf_counter() - t0
    if models is None or len(models) != n:
        return None, False, seconds
    return Held(spec.from_resource, models), True, seconds


def run_rung_steps(
    data: SearchData,
    context: RungContext,
    specs: list[RungSpec],
    start_by: float | None = None,
    stop_by: float | None = None,
) -> list[RungResult]:
    """Run a batch of rung steps in order (the unit of work the runner submits)."""
    worker = _worker_name()
    out: list[RungResult] = []
    with _quiet_warnings():
        for spec in specs:
            if start_by is not None and time.time() >= start_by:
                break
            out.append(run_rung_step(data, context, spec, worker, stop_by))
    return out
