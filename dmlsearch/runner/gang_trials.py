"""Search trials that each train on k workers at once: xgboost's Dask engine, or torch
data-parallel, on a gang.

``SearchCV(workers_per_trial=k)`` with k > 1 runs each trial as a gang (see
:mod:`dmlsearch.runner.gang`): k workers reserved together, so two trials never deadlock
each holding half of them. Each CV fold is trained on the trial's gang and the fitted
model comes back to the driver as the search's own kind of estimator, scored there with
the search's scorer. Trials run ``n_workers // k`` at a time, each driven by a thread of
the driver. Two kinds of estimator train so:

* xgboost's ``XGBClassifier`` and friends: the fold's training rows are split into k
  contiguous, non-empty parts, one scattered to each gang worker, and trained with
  xgboost's own Dask estimator (``xgboost.dask.DaskXGBClassifier``...); the booster comes
  back as the matching scikit-learn estimator;
* ``dmlsearch.training.TorchClassifier`` / ``TorchRegressor``: the fold is trained by
  :class:`~dmlsearch.training.DataParallelTrainer`'s ranks, one on each gang worker
  (:mod:`dmlsearch.training._gang_fold`); the weights come back into a fitted estimator.

A collective hangs when a worker leaves mid-training; here the driver watches the gang: a
lost worker ends the trial within seconds, recorded ``failed`` with
:class:`~dmlsearch.exceptions.GangWorkerLostError` naming the worker, and the search goes
on. The collective's own timeout (``collective_timeout``) frees the surviving ranks.
While the cluster has fewer than k workers (a nanny restarting the lost one), the trials
wait for it, all on one clock (:class:`_Shortage`); after ``dmlsearch.no-workers-timeout``
seconds the search ends with :class:`~dmlsearch.exceptions.NoWorkersError`, as a search
whose cluster has no worker does; the trials that finished stay recorded.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import logging
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import dask
import numpy as np
from distributed import Client
from sklearn.base import clone, is_classifier
from sklearn.utils.metaestimators import _safe_split

from .._evaluate import EvalContext, SearchData, TrialOutcome, TrialSpec
from .._scoring import score_fold
from .._states import COMPLETE, FAILED
from ..exceptions import GangWorkerLostError, InvalidParameterError, NoWorkersError
from ..progress import NullProgress
from .gang import Gang, alive_workers, reserve
from .loop import RunStats
from .trials import StrategySource, TrialKind
from .units import DONE, WAIT, Unit, UnitPolicy

__all__ = [
    "GangTrialRunner",
    "check_data_parallel_refit",
    "check_workers_per_trial",
    "dask_twin",
    "is_torch_estimator",
]

R = TypeVar("R")

logger = logging.getLogger("dmlsearch")

#: Seconds a fold's training may go on after a gang worker left before it is given up.
LOSS_GRACE = 5.0

_TWINS = (  # the random-forest variants subclass the boosted ones: look them up first
    ("XGBRFClassifier", "DaskXGBRFClassifier"),
    ("XGBRFRegressor", "DaskXGBRFRegressor"),
    ("XGBClassifier", "DaskXGBClassifier"),
    ("XGBRegressor", "DaskXGBRegressor"),
)


def dask_twin(estimator: Any) -> type | None:
    """xgboost's Dask estimator for an xgboost scikit-learn estimator, else None."""
    if not type(estimator).__module__.startswith("xgboost"):
        return None
    import xgboost

    try:
        from xgboost import dask as dxgb
    except ImportError as exc:
        raise InvalidParameterError(
            "workers_per_trial",
            f"xgboost's Dask engine cannot be imported ({exc}); it needs dask.dataframe: "
            "pip install 'dmlsearch[xgboost]' (or 'dask[dataframe]')",
        ) from exc
    for local, twin in _TWINS:
        if isinstance(estimator, getattr(xgboost, local)):
            return getattr(dxgb, twin)
    return None


def is_torch_estimator(estimator: Any) -> bool:
    """Whether ``estimator`` is a ``TorchClassifier``/``TorchRegressor`` (imports nothing)."""
    # One exists only once its module was imported: torch is never imported to answer.
    module = sys.modules.get("dmlsearch.training.estimators")
    return module is not None and isinstance(estimator, module._TorchEstimator)


def check_workers_per_trial(workers_per_trial: Any, estimator: Any) -> int:
    """``workers_per_trial`` as an int, or InvalidParameterError saying what to change."""
    k = workers_per_trial
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidParameterError("workers_per_trial", f"must be an int >= 1, got {k!r}")
    if k > 1 and is_torch_estimator(estimator):
        from ..training._gang_fold import check_estimator

        check_estimator(estimator, int(k))
    elif k > 1 and dask_twin(estimator) is None:
        raise InvalidParameterError(
            "workers_per_trial",
            f"workers_per_trial={k} trains each trial on {k} workers: the estimator must be "
            "xgboost's XGBClassifier, XGBRegressor, XGBRFClassifier or XGBRFRegressor "
            "(trained with xgboost's Dask engine) or dmlsearch.training's TorchClassifier "
            f"or TorchRegressor (trained data-parallel), got {type(estimator).__name__}. "
            "Use workers_per_trial=1 for any other estimator",
        )
    return int(k)


def check_data_parallel_refit(estimator: Any) -> None:
    """Before a search: a torch estimator with ``trainer__n_workers > 1`` is refitted on the
    driver data-parallel (its trials train on ``workers_per_trial`` workers): everything that
    refit needs but the data is checked now, not after the search."""
    if not is_torch_estimator(estimator):
        return
    if int(estimator.trainer_options()["n_workers"]) > 1:
        from ..training._gang_fold import check_data_parallel

        check_data_parallel(estimator)


def _check_gang_parts(X: Any, y: Any, classifier: bool = False) -> None:
    """InvalidParameterError for an ``X`` that :func:`_parts` cannot split into dense
    NumPy parts as it is: a sparse matrix, or text and categorical columns (their dtype
    would be lost, and xgboost fail on a worker or train on codes as numbers); or for
    labels ``y`` that are not numbers (xgboost's Dask engine fails on them on a worker)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    if y is not None and np.asarray(y).dtype.kind not in "biuf":
        raise InvalidParameterError(
            "y",
            f"workers_per_trial > 1 trains with xgboost's Dask engine, which takes labels "
            f"as numbers, and y has dtype {getattr(y, 'dtype', np.asarray(y).dtype)}: "
            "encode them first, e.g. y = sklearn.preprocessing.LabelEncoder()"
            ".fit_transform(y) (its inverse_transform maps predictions back)",
        )
    if classifier and y is not None:
        # xgboost's Dask engine trains on the labels as they are: its classifiers need
        # 0 .. n_classes - 1 and fail on each worker otherwise, after the search began.
        labels = np.unique(np.asarray(y))
        if not np.array_equal(labels, np.arange(len(labels))):
            shown = ", ".join(map(str, labels[:5].tolist())) + (", ..." if len(labels) > 5 else "")
            raise InvalidParameterError(
                "y",
                f"workers_per_trial > 1 trains with xgboost's Dask engine, which takes a "
                f"classifier's labels as 0 .. n_classes - 1, and y has {shown}: encode them "
                "first, e.g. y = sklearn.preprocessing.LabelEncoder().fit_transform(y) (its "
                "inverse_transform maps predictions back)",
            )

    hint = "or use workers_per_trial=1, which takes it as it is"
    if hasattr(X, "tocsr"):
        raise InvalidParameterError(
            "X",
            "workers_per_trial > 1 splits X into dense parts on the gang's workers, and X "
            f"is a scipy sparse matrix: pass X.toarray() if it fits in memory, {hint}",
        )
    dtypes = getattr(X, "dtypes", None)
    if dtypes is not None and getattr(X, "ndim", 0) == 2:
        bad = {
            str(c): str(d)
            for c, d in dtypes.items()
            if not (is_numeric_dtype(d) or is_bool_dtype(d)) or str(d) == "category"
        }
        if bad:
            shown = ", ".join(f"{c!r} ({d})" for c, d in list(bad.items())[:5])
            raise InvalidParameterError(
                "X",
                f"workers_per_trial > 1 splits X into NumPy parts, which would lose the "
                f"dtype of columns {shown}: encode them as numbers, {hint}",
            )
    elif np.asarray(X).dtype.kind not in "biuf":
        raise InvalidParameterError(
            "X",
            f"workers_per_trial > 1 trains on numbers, and X has dtype "
            f"{np.asarray(X).dtype}: encode it as numbers, {hint}",
        )


def _parts(client: Client, workers: list[str], X: Any, y: Any) -> tuple[Any, Any]:
    """``X`` and ``y`` as Dask arrays with one contiguous, non-empty part on each worker."""
    import dask.array as da

    X, y = np.asarray(X), np.asarray(y)
    xs, ys = [], []
    for worker, rows in zip(workers, np.array_split(np.arange(len(X)), len(workers)), strict=True):
        part_x = client.scatter(X[rows], workers=[worker], direct=True)
        part_y = client.scatter(y[rows], workers=[worker], direct=True)
        xs.append(da.from_delayed(part_x, shape=(len(rows), *X.shape[1:]), dtype=X.dtype))
        ys.append(da.from_delayed(part_y, shape=(len(rows), *y.shape[1:]), dtype=y.dtype))
    return da.concatenate(xs), da.concatenate(ys)


def _to_local(model: Any, local_cls: type) -> Any:
    """The trained Dask estimator as its scikit-learn twin (booster and classes kept)."""
    fd, path = tempfile.mkstemp(suffix=".ubj")
    os.close(fd)
    try:
        model.save_model(path)
        local = local_cls(**model.get_params())
        local.load_model(path)
    finally:
        os.unlink(path)
    return local


def _fit(client: Client, model: Any, X: Any, y: Any, xgb_model: Any = None) -> Any:
    # xgboost.dask looks for the current client (distributed.get_client) even when it is
    # given one; a thread starts with no current client of its own.
    with client.as_current():
        return model.fit(X, y, xgb_model=xgb_model)


def fit_xgboost(
    gang: Gang, estimator: Any, timeout: float, X: Any, y: Any, xgb_model: Any = None
) -> Any:
    """``estimator`` (an xgboost scikit-learn estimator) fitted on ``(X, y)`` by xgboost's
    Dask engine on the workers of ``gang``; ``xgb_model``: a booster to boost on from."""
    from xgboost.collective import Config

    twin = dask_twin(estimator)
    assert twin is not None
    model = twin(**estimator.get_params())
    model.coll_cfg = Config(timeout=int(timeout))
    model.client = gang.client
    Xd, yd = _parts(gang.client, gang.workers, X, y)
    _fit(gang.client, model, Xd, yd, xgb_model)
    return _to_local(model, type(estimator))


@dataclasses.dataclass
class GangFold:
    """One fold trained on a gang: the fitted model (None if its fit failed), its scores
    (empty if it failed), its times and its error (a traceback) or None."""

    fitted: Any
    test: dict[str, float]
    train: dict[str, float]
    fit_time: float
    score_time: float
    error: str | None


def fit_and_score(
    fit: Callable[[], Any],
    ev: EvalContext,
    X_train: Any,
    y_train: Any,
    X_test: Any,
    y_test: Any,
) -> GangFold:
    """``fit()`` (a fold's training on a gang, :func:`_guarded`), then the fitted model
    scored. As in a one-worker trial (and scikit-learn), a fit or test scoring that raises
    is the fold's error and the caller's other folds stand (``error_score="raise"`` raises
    it); a lost gang worker raises."""
    t0 = time.perf_counter()
    try:
        fitted = fit()
    except (GangWorkerLostError, NoWorkersError):
        raise
    except Exception:
        if ev.error_score == "raise":
            raise
        return GangFold(None, {}, {}, time.perf_counter() - t0, 0.0, traceback.format_exc())
    fit_time = time.perf_counter() - t0
    t1 = time.perf_counter()
    test, train, error = score_fold(
        ev.scorer,
        ev.multimetric,
        ev.error_score,
        fitted,
        (X_test, y_test, None),
        (X_train, y_train, None) if ev.return_train_score else None,
    )
    return GangFold(fitted, test, train, fit_time, time.perf_counter() - t1, error)


def _guarded(gang: Gang, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a thread, given up (GangWorkerLostError) if a gang worker leaves."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"dmlsearch-{gang.name}", daemon=True)
    thread.start()
    lost: GangWorkerLostError | None = None
    lost_at = 0.0
    while thread.is_alive():
        thread.join(0.5)
        if lost is None:
            gone = [w for w in gang.workers if w not in alive_workers(gang.client, running=False)]
            if gone:
                lost, lost_at = _lost_error(gang, gone[0]), time.monotonic()
        elif time.monotonic() - lost_at > LOSS_GRACE:
            raise lost  # the collective may hang: leave its thread behind
    if lost is not None:
        raise lost
    if "error" in box:
        raise box["error"]
    return box["value"]


def _lost_error(gang: Gang, worker: str) -> GangWorkerLostError:
    rank = gang.workers.index(worker)
    return GangWorkerLostError(
        f"{gang.name}: worker {worker} (rank {rank} of {gang.size}) left the cluster during "
        "training; the trial was given up",
        worker=worker,
        rank=rank,
    )


class _Shortage:
    """One clock for a run's wait on a cluster that has fewer than k workers (one was
    lost; its nanny restarts it): every trial that waits for a gang meanwhile shares it,
    so they wait ``timeout`` seconds together, not one after the other; past it, each
    raises NoWorkersError, which ends the search."""

    def __init__(self, k: int, name: str, timeout: float) -> None:
        self.k = k
        self.name = name
        self.timeout = timeout
        self._since: float | None = None
        self._lock = threading.Lock()

    def wait(self, n_workers: int) -> None:
        """The cluster has ``n_workers`` < k: NoWorkersError once it has had fewer than k
        for ``timeout`` seconds (``reserve``'s ``while_short``)."""
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since = now
                logger.warning(
                    "dmlsearch: %s: the cluster has fewer workers (%d) than the %d a trial "
                    "trains on; trials wait for workers up to %.0f s "
                    "(dmlsearch.no-workers-timeout)",
                    self.name,
                    n_workers,
                    self.k,
                    self.timeout,
                )
            elif now - self._since > self.timeout:
                raise NoWorkersError(
                    f"{self.name}: each trial trains on {self.k} workers at once and the "
                    f"cluster has had fewer ({n_workers}) for {self.timeout:.0f} s "
                    "(dmlsearch.no-workers-timeout), so the search cannot go on; start "
                    "workers (or check why they die) and resume it (finished trials stay "
                    "recorded)"
                )

    def over(self) -> None:
        """A gang was admitted: the cluster has k workers again."""
        with self._lock:
            self._since = None


class GangTrialRunner:
    """Runs a search's trials as gangs of ``workers_per_trial`` workers.

    The same front as :class:`~dmlsearch.runner.DaskRunner` (``run`` and ``stats``), fed
    by the same :class:`~dmlsearch.runner.trials.StrategySource`: trials are numbered,
    recorded and told to the strategy exactly as single-worker trials are.
    """

    def __init__(
        self,
        client: Client,
        workers_per_trial: int,
        *,
        collective_timeout: int = 30,
        time_budget: float | None = None,
        budget_start: float | None = None,
        progress: Any = None,
        observer: Any = None,
        name: str = "search",
    ) -> None:
        self.client = client
        self.k = workers_per_trial
        self.collective_timeout = collective_timeout
        self.time_budget = time_budget
        self.budget_start = budget_start
        self.progress = progress or NullProgress()
        self.observer = observer
        self.name = name
        self.stats = RunStats()
        timeout = float(dask.config.get("dmlsearch.no-workers-timeout", 60.0))
        self._shortage = _Shortage(workers_per_trial, name, timeout)

    def run(
        self,
        strategy: Any,
        data: SearchData,
        context: EvalContext,
        seed: int,
        on_outcome: Callable[[TrialOutcome], float | None],
        *,
        skip: set[int] | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        n_workers = self._check_cluster()
        self._check_data(data, context.estimator)
        source = StrategySource(
            strategy,
            seed,
            on_outcome,
            skip=skip or set(),
            observer=self.observer,
            estimator=context.estimator,
        )
        kind = TrialKind(data, context, UnitPolicy())
        started = time.monotonic() if self.budget_start is None else self.budget_start
        ends = None if self.time_budget is None else started + self.time_budget
        self._drive(
            source,
            lambda unit: self._trial(kind, unit, data, context),
            n_workers,
            ends,
            on_tick,
        )

    def run_rungs(
        self,
        source: Any,
        steps: Any,
        *,
        ends: float | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> RunStats:
        """Run a multi-fidelity search's rung steps (``source``: a
        :class:`~dmlsearch.runner.rungs.RungSource`), each on a gang, with ``steps`` (a
        :class:`~dmlsearch.runner.gang_rungs.GangRungSteps`); ``ends``: a
        ``time.monotonic()`` after which no step starts. Returns the run's stats."""
        n_workers = self._check_cluster()
        evaluation = steps.context.evaluation
        self._check_data(steps.data, evaluation.estimator)

        def rung(unit: Unit[Any]) -> Any:
            spec = unit.payload
            return self._on_gang(
                f"trial {spec.trial} (to {spec.resource})",
                lambda gang: steps.step(gang, spec),
                lambda error: steps.failed(spec, FAILED, error),
                evaluation.error_score,
            )

        try:
            self._drive(source, rung, n_workers, ends, on_tick)
        finally:
            steps.release()
        return self.stats

    @staticmethod
    def _check_data(data: SearchData, estimator: Any) -> None:
        if data.fit_params:
            names = sorted(data.fit_params)
            why = ""
            if any(name.endswith("eval_set") for name in names):
                why = (
                    ": xgboost's early stopping (on an eval_set) is not available with "
                    "workers_per_trial > 1; drop early_stopping_rounds and eval_set and let "
                    "a scheduler stop poor trials (scheduler='asha', "
                    "resource='n_estimators'), or use workers_per_trial=1"
                )
            raise InvalidParameterError(
                "fit_params", f"workers_per_trial > 1 takes no fit parameters, got {names}{why}"
            )
        if is_torch_estimator(estimator):
            from ..training._gang_fold import check_X

            check_X(data.X)
        else:
            _check_gang_parts(data.X, data.y, classifier=is_classifier(estimator))

    def _check_cluster(self) -> int:
        n_workers = len(alive_workers(self.client))
        if self.k > n_workers:
            raise InvalidParameterError(
                "workers_per_trial",
                f"workers_per_trial={self.k} but the cluster has {n_workers} workers: lower "
                "it or add workers",
            )
        return n_workers

    def _drive(
        self,
        source: Any,
        run_unit: Callable[[Unit[Any]], Any],
        n_workers: int,
        ends: float | None,
        on_tick: Callable[[], None] | None,
    ) -> None:
        """Units from ``source``, each run by ``run_unit`` in a driver thread, as many at
        once as the cluster has room for gangs; every result recorded once."""
        slots = max(1, n_workers // self.k)
        self.progress.start(source.total, self.name, source.done_before)
        best: float | None = None
        running: dict[cf.Future[Any], Unit[Any]] = {}
        exhausted = False
        try:
            with cf.ThreadPoolExecutor(slots, thread_name_prefix="dmlsearch-gang") as pool:
                while True:
                    while not exhausted and len(running) < slots:
                        if ends is not None and time.monotonic() >= ends:
                            self.stats.stopped_by_budget = exhausted = True
                            break
                        unit = source.propose()
                        if unit is DONE:
                            exhausted = True
                        if unit is DONE or unit is WAIT:
                            break
                        assert isinstance(unit, Unit)
                        source.submitted([unit])
                        self.stats.submitted_tasks += 1
                        running[pool.submit(run_unit, unit)] = unit
                    if not running:
                        break
                    done, _ = cf.wait(running, timeout=0.2, return_when=cf.FIRST_COMPLETED)
                    for future in done:
                        unit = running.pop(future)
                        value = source.record(unit, future.result(), 0)
                        self.stats.recorded += 1
                        if value is not None and (best is None or value > best):
                            best = value
                    if on_tick is not None:
                        on_tick()
                    if self.observer is not None:
                        self.observer.tick()
                    self.progress.update(
                        self.stats.recorded + source.done_before,
                        source.failed_count(),
                        len(running),
                        best,
                    )
        finally:
            self.progress.close()

    def _trial(
        self, kind: TrialKind, unit: Unit[TrialSpec], data: SearchData, context: EvalContext
    ) -> TrialOutcome:
        spec = unit.payload
        return self._on_gang(
            f"trial {spec.number}",
            lambda gang: self._folds(gang, spec, data, context),
            lambda error: kind.failed(unit, FAILED, error),
            context.error_score,
        )

    def _on_gang(
        self,
        name: str,
        work: Callable[[Gang], R],
        failed: Callable[[str], R],
        error_score: Any,
    ) -> R:
        """``work`` on a gang reserved for it (once the cluster has k workers), or
        ``failed(error)`` when a gang worker was lost or ``work`` raised (which re-raises
        with ``error_score="raise"``). NoWorkersError (the cluster has had fewer than k
        workers too long) is no trial's failure: it ends the search."""
        try:
            with reserve(self.client, self.k, name=name, while_short=self._shortage.wait) as gang:
                self._shortage.over()
                return work(gang)
        except GangWorkerLostError as exc:
            return failed(f"GangWorkerLostError: {exc}")
        except NoWorkersError:
            raise
        except Exception:
            if error_score == "raise":
                raise
            return failed(traceback.format_exc())

    def _fold_fitter(self, gang: Gang, estimator: Any, spec: TrialSpec) -> Callable[..., Any]:
        """``fit(X_train, y_train)``: one fold trained on the gang, fitted on the driver."""
        if is_torch_estimator(estimator):
            from ..training._gang_fold import fit_fold

            # A random_state=None net draws from this as a one-worker trial draws from
            # NumPy's global generator, which run_trial seeds with the trial's seed.
            draws = np.random.RandomState(spec.seed % (2**32))

            def fit_torch(X: Any, y: Any) -> Any:
                net = clone(estimator)
                return fit_fold(gang, net, X, y, draws, float(self.collective_timeout))

            return fit_torch
        return functools.partial(fit_xgboost, gang, estimator, self.collective_timeout)

    def _folds(
        self, gang: Gang, spec: TrialSpec, data: SearchData, context: EvalContext
    ) -> TrialOutcome:
        """The trial's folds trained on ``gang`` one after another. As in a one-worker trial
        (and scikit-learn), a fold that fails scores ``error_score`` and the others stand;
        a lost gang worker fails the trial."""
        started = time.time()
        estimator = clone(context.estimator).set_params(**clone(spec.params, safe=False))
        fit = self._fold_fitter(gang, estimator, spec)
        test_scores: list[dict[str, float]] = []
        train_scores: list[dict[str, float]] | None = [] if context.return_train_score else None
        fit_times: list[float] = []
        score_times: list[float] = []
        error: str | None = None
        for train, test in context.splits:
            X_train, y_train = _safe_split(estimator, data.X, data.y, train)
            X_test, y_test = _safe_split(estimator, data.X, data.y, test, train)
            if len(train) < gang.size:
                raise InvalidParameterError(
                    "workers_per_trial",
                    f"a fold has {len(train)} training rows, fewer than the {gang.size} "
                    "workers of a trial: every worker needs rows",
                )
            guarded = functools.partial(_guarded, gang, functools.partial(fit, X_train, y_train))
            fold = fit_and_score(guarded, context, X_train, y_train, X_test, y_test)
            error = error or fold.error
            fit_times.append(fold.fit_time)
            score_times.append(fold.score_time)
            test_scores.append(fold.test)
            if train_scores is not None:
                train_scores.append(fold.train)
        return TrialOutcome(
            number=spec.number,
            params=spec.params,
            seed=spec.seed,
            state=COMPLETE if error is None else FAILED,
            test_scores=test_scores,
            train_scores=train_scores,
            fit_times=fit_times,
            score_times=score_times,
            started=started,
            finished=time.time(),
            worker="+".join(gang.workers),
            error=error,
        )
