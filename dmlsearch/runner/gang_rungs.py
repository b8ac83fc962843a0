"""Rung steps of gang trials: ``SearchCV(scheduler=..., workers_per_trial=k)``.

A multi-fidelity search whose trials each train on a gang of k workers
(:mod:`dmlsearch.runner.gang_trials`), with torch epochs (``resource="max_epochs"``,
data-parallel torch trials) or xgboost's boosting rounds (``resource="n_estimators"``,
xgboost's Dask engine) as the budget. Each rung step reserves a gang and trains every CV
fold of one trial on it; a promoted trial's folds continue from their trained models
(a net's module and optimizer state; a booster) for the rung's extra epochs or rounds
only, so the work done across rungs is that of the highest rung each trial reached.

Where the state lives: a gang-trained fold model comes back to the driver at the end of
each fit (the fitted model the search scores there), so the trials' fold models are held
by the driver between rungs, not by a worker as one-worker rung steps' states are; they
are dropped as soon as the scheduler says a trial will not be continued. A step whose
state is gone (a resumed search) trains its folds from scratch to the rung's epochs.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.utils.metaestimators import _safe_split

from .._evaluate import SearchData
from .._rungs import RungContext, RungResult, RungSpec
from .._states import COMPLETE, FAILED
from ..exceptions import InvalidParameterError
from .gang import Gang

__all__ = ["GangRungSteps", "check_gang_resource"]


def gang_resource(estimator: Any) -> str:
    """The resource a gang trial of ``estimator`` counts: torch epochs or boosting rounds."""
    from .gang_trials import is_torch_estimator

    return "max_epochs" if is_torch_estimator(estimator) else "n_estimators"


def check_gang_resource(resource: Any, k: int, estimator: Any) -> None:
    """InvalidParameterError unless ``resource`` can be the budget of k-worker trials."""
    wanted = gang_resource(estimator)
    if resource != wanted:
        what = "torch epochs" if wanted == "max_epochs" else "xgboost's boosting rounds"
        raise InvalidParameterError(
            "resource",
            f"resource={resource!r} does not combine with workers_per_trial={k}: these "
            f"trials count their budget in {what}, resource={wanted!r} (or use "
            "workers_per_trial=1)",
        )


class GangRungSteps:
    """Runs rung steps of gang trials; holds each trial's fold models between rungs.

    ``timeout``: seconds a collective of a fold's ranks may wait. Thread-safe: steps of
    different trials run in the driver's threads at once.
    """

    def __init__(self, data: SearchData, context: RungContext, timeout: float) -> None:
        self.data = data
        self.context = context
        self.timeout = timeout
        self._held: dict[int, tuple[int, list[Any]]] = {}
        self._lock = threading.Lock()

    def release(self, trials: list[int] | None = None) -> None:
        """Drop the fold nets of ``trials`` (every trial's if None)."""
        with self._lock:
            if trials is None:
                self._held.clear()
            for trial in trials or ():
                self._held.pop(trial, None)

    def failed(self, spec: RungSpec, state: str, error: str) -> RungResult:
        """The result of a step that could not run (its trial's nets are dropped)."""
        self.release([spec.trial])
        ev = self.context.evaluation
        return RungResult.of(spec, state, len(ev.splits), ev.return_train_score, error=error)

    def _take(self, spec: RungSpec) -> tuple[int, list[Any]] | None:
        with self._lock:
            held = self._held.pop(spec.trial, None)
        n = len(self.context.evaluation.splits)
        if held is None or spec.from_resource == 0 or held[0] != spec.from_resource:
            return None
        return held if len(held[1]) == n else None

    def _fit(
        self, gang: Gang, model: Any, X: Any, y: Any, previous: int, resource: int, draws: Any
    ) -> tuple[Any, int]:
        """``model`` (a fold's: unfitted, or fitted to ``previous``) trained to ``resource``
        on ``gang``; returns the fitted model, which says ``resource``, and the resource
        units trained (``resource - previous``, or ``resource`` when refitted)."""
        from ..fidelity import is_xgboost_forest
        from .gang_trials import _guarded, fit_xgboost, is_torch_estimator

        if is_torch_estimator(model):
            from ..training._gang_fold import fit_fold

            model.set_params(max_epochs=resource - previous)
            fit = functools.partial(
                fit_fold, gang, model, X, y, draws, self.timeout, continued=previous > 0
            )
            _guarded(gang, fit)
            return model.set_params(max_epochs=resource), resource - previous
        if is_xgboost_forest(model):
            previous = 0  # one round of trees: more trees are a new forest, refitted
        # xgboost: the rounds left, boosted on from the fold's booster.
        booster = model.get_booster() if previous > 0 else None
        rounds = clone(model).set_params(n_estimators=resource - previous)
        fit = functools.partial(fit_xgboost, gang, rounds, self.timeout, X, y, booster)
        return _guarded(gang, fit).set_params(n_estimators=resource), resource - previous

    def _train(
        self,
        gang: Gang,
        net: Any,
        X: Any,
        y: Any,
        previous: int,
        resource: int,
        draws: Any,
        trained: list[int],
    ) -> Any:
        """:meth:`_fit` when there is training to do (else ``net`` as it is); the resource
        units it trained go to ``trained[0]``."""
        if resource <= previous:
            return net
        fitted, trained[0] = self._fit(gang, net, X, y, previous, resource, draws)
        return fitted

    def step(self, gang: Gang, spec: RungSpec) -> RungResult:
        """Train and score the trial's folds to ``spec.resource`` on ``gang``; a fold that
        fails scores ``error_score`` and fails the step, as in a one-worker step."""
        from .gang_trials import fit_and_score

        ev, data = self.context.evaluation, self.data
        started = time.time()
        held = self._take(spec)
        fresh = clone(ev.estimator).set_params(**clone(spec.params, safe=False))
        # A random_state=None net draws its seed from this, as a gang trial does.
        draws = np.random.RandomState(spec.seed % (2**32))
        test: list[dict[str, float]] = []
        train: list[dict[str, float]] = []
        fit_times: list[float] = []
        score_times: list[float] = []
        nets: list[Any] = []
        work, went_on, error = 0, True, None
        for fold, (rows, test_rows) in enumerate(ev.splits):
            X_train, y_train = _safe_split(fresh, data.X, data.y, rows)
            X_test, y_test = _safe_split(fresh, data.X, data.y, test_rows, rows)
            previous = held[0] if held is not None else 0
            net = held[1][fold] if held is not None else clone(fresh)
            trained = [0]
            fit = functools.partial(
                self._train, gang, net, X_train, y_train, previous, spec.resource, draws, trained
            )
            done = fit_and_score(fit, ev, X_train, y_train, X_test, y_test)
            error = error or done.error
            went_on = went_on and trained[0] == max(spec.resource - previous, 0)
            work += trained[0]
            fit_times.append(done.fit_time)
            score_times.append(done.score_time)
            test.append(done.test)
            train.append(done.train)
            nets.append(done.fitted)
        n = len(ev.splits)
        if error is not None:
            # As a one-worker step: a failed step keeps no state to continue from.
            self.release([spec.trial])
        else:
            with self._lock:
                self._held[spec.trial] = (spec.resource, nets)
        return RungResult.of(
            spec,
            COMPLETE if error is None else FAILED,
            n,
            ev.return_train_score,
            test_scores=test,
            train_scores=train if ev.return_train_score else None,
            fit_times=fit_times,
            score_times=score_times,
            started=started,
            finished=time.time(),
            worker="+".join(gang.workers),
            work=work / n,
            continued=held is not None and went_on,
            stored=error is None,
            error=error,
        )
