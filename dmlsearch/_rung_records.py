"""A multi-fidelity search's rows: kept on the driver, recorded, and read back on resume.

Each trial is one record of the experiment, rewritten after each of its rung steps (one
upsert, so a record always describes whole steps). Its ``intermediate`` holds

* ``"<resource>"``: the mean score at that resource (the learning curve the report draws);
* ``"<resource>:<field>"``: every step's own numbers, so that a resume rebuilds each
  (trial, rung) row of ``cv_results_`` exactly: ``rung``, ``bracket``, ``from``,
  ``work``, ``continued`` (0/1), ``from_store`` (0/1), ``started``, ``finished``, ``retries``,
  ``fit_time:<fold>``, ``score_time:<fold>``, ``test:<metric>:<fold>`` and
  ``train:<metric>:<fold>``.

Keys that are not numbers are left out of learning curves (:func:`dmlsearch.report`).
A step before a trial's latest one always completed (a step without a score ends its
trial); the latest step's state, error and worker are the record's own. The worker of an
earlier step is not kept (it is a name, not a number).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ._rungs import RungResult
from ._search_recording import config_snapshot, open_search_experiment, recorded_search_params
from ._states import COMPLETE
from .exceptions import InvalidParameterError

if TYPE_CHECKING:
    from ._recording import PriorRun, SearchRecorder
    from .registry import Registry, TrialRecord
    from .search import SearchCV
    from .strategies import Strategy

__all__ = ["RungRows", "open_experiment", "restore_steps", "step_fields", "steps_from_record"]

#: Per-step numbers (not per fold), as ``"<resource>:<name>"``.
_STEP = (
    "rung",
    "bracket",
    "from",
    "work",
    "continued",
    "from_store",
    "started",
    "finished",
    "retries",
)
_FOLD_TIMES = ("fit_time", "score_time")
_FOLD_SCORES = ("test", "train")


def step_fields(step: RungResult) -> dict[str, float]:
    """``step``'s numbers as ``intermediate`` entries (see the module's docstring)."""
    r = step.resource
    out: dict[str, float] = {
        f"{r}:rung": float(step.rung),
        f"{r}:bracket": float(step.bracket),
        f"{r}:from": float(step.from_resource),
        f"{r}:work": float(step.work),
        f"{r}:continued": float(step.continued),
        f"{r}:from_store": float(step.from_store),
        f"{r}:started": float(step.started),
        f"{r}:finished": float(step.finished),
        f"{r}:retries": float(step.retries),
    }
    for kind, times in (("fit_time", step.fit_times), ("score_time", step.score_times)):
        for k, seconds in enumerate(times):
            out[f"{r}:{kind}:{k}"] = float(seconds)
    for kind, folds in (("test", step.test_scores), ("train", step.train_scores or [])):
        for k, fold in enumerate(folds):
            for name, score in fold.items():
                out[f"{r}:{kind}:{name}:{k}"] = float(score)
    return out


def _parse(intermediate: dict[str, Any]) -> dict[int, dict[Any, Any]]:
    """``{resource: {field: value, (kind, fold): value, (kind, metric, fold): value}}``."""
    out: dict[int, dict[Any, Any]] = {}
    for key, value in intermediate.items():
        parts = str(key).split(":", 2)
        if len(parts) < 2:
            continue  # a learning-curve point
        try:
            resource = int(parts[0])
            fields = out.setdefault(resource, {})
            if parts[1] in _STEP:
                fields[parts[1]] = float(value)
            elif parts[1] in _FOLD_TIMES:
                fields[(parts[1], int(parts[2]))] = float(value)
            elif parts[1] in _FOLD_SCORES:
                metric, fold = parts[2].rsplit(":", 1)
                fields[(parts[1], metric, int(fold))] = float(value)
        except (ValueError, IndexError, TypeError):
            continue
    return {r: f for r, f in out.items() if "rung" in f}


def steps_from_record(
    record: TrialRecord, params: dict[str, Any], n_splits: int, return_train_score: bool
) -> list[RungResult]:
    """The rung steps of a recorded trial, by resource (as :meth:`RungRows.add` wrote them).

    Raises InvalidParameterError for a record without step numbers (written by a version
    of dmlsearch that did not keep them).
    """
    parsed = _parse(record.intermediate or {})
    if not parsed:
        raise InvalidParameterError(
            "resume",
            f"trial {record.number} of this experiment has no rung steps recorded (an older "
            "dmlsearch kept only its learning curve), so its rows cannot be rebuilt: start "
            "a new experiment (another experiment_name)",
        )
    last = max(parsed)
    steps = []
    for resource in sorted(parsed):
        f = parsed[resource]
        folds = range(n_splits)
        test = [{m: v for (kind, m, k), v in _scores(f, "test") if k == fold} for fold in folds]
        train = [{m: v for (kind, m, k), v in _scores(f, "train") if k == fold} for fold in folds]
        latest = resource == last
        steps.append(
            RungResult(
                number=record.number,
                params=params,
                seed=int(record.seed or 0),
                state=record.state if latest else COMPLETE,
                test_scores=test,
                train_scores=train if return_train_score else None,
                fit_times=[float(f.get(("fit_time", k), 0.0)) for k in folds],
                score_times=[float(f.get(("score_time", k), 0.0)) for k in folds],
                started=f.get("started", 0.0),
                finished=f.get("finished", 0.0),
                worker=(record.worker or "") if latest else "",
                error=record.error if latest else None,
                retries=int(f.get("retries", 0)),
                rung=int(f["rung"]),
                resource=resource,
                from_resource=int(f.get("from", 0)),
                bracket=int(f.get("bracket", 0)),
                work=f.get("work", 0.0),
                continued=bool(f.get("continued", 0.0)),
                from_store=bool(f.get("from_store", 0.0)),
                stored=False,
            )
        )
    return steps


def _scores(fields: dict[Any, Any], kind: str) -> list[tuple[tuple[str, str, int], float]]:
    return [(k, v) for k, v in fields.items() if isinstance(k, tuple) and k[0] == kind]


class RungRows:
    """What the driver keeps of each step: its row of ``cv_results_`` and its record.

    ``recorder`` (None: no registry) hears each trial's record after each of its steps,
    with every step of the trial in ``intermediate``.
    """

    def __init__(self, primary: str, n_splits: int, recorder: SearchRecorder | None) -> None:
        self.primary = primary
        self.n_splits = n_splits
        self.recorder = recorder
        self.outcomes: dict[tuple[int, int], RungResult] = {}
        self.curves: dict[int, list[tuple[int, float]]] = {}
        self.by_trial: dict[int, list[RungResult]] = {}

    def score(self, result: RungResult) -> float | None:
        """The step's mean score of the primary metric; None when it is not finite."""
        values = [fold.get(self.primary, np.nan) for fold in result.test_scores]
        value = float(np.mean(values)) if values else float("nan")
        return value if math.isfinite(value) else None

    def _keep(self, result: RungResult) -> None:
        self.outcomes[result.id] = result
        self.by_trial.setdefault(result.trial, []).append(result)
        value = self.score(result) if result.state == COMPLETE else None
        curve = self.curves.setdefault(result.trial, [])
        if value is not None:
            curve.append((result.resource, value))

    def add(self, result: RungResult, retries: int) -> None:
        """A step that ended in this run: kept, and its trial's record rewritten."""
        result.retries = retries
        self._keep(result)
        if self.recorder is not None:
            self.recorder.add(result, intermediate=self.intermediate(result.trial))

    def restore(self, steps: list[RungResult]) -> None:
        """Steps an earlier run recorded (resume): kept as rows, not written again."""
        for step in sorted(steps, key=lambda s: (s.trial, s.resource)):
            self._keep(step)

    def intermediate(self, trial: int) -> dict[str, float]:
        """``trial``'s record's ``intermediate``: its curve and every step's numbers."""
        out = {str(r): s for r, s in self.curves.get(trial, [])}
        for step in self.by_trial.get(trial, []):
            out.update(step_fields(step))
        return out


def open_experiment(
    search: SearchCV,
    registry: Registry,
    name: str,
    primary: str,
    seed: int,
    n_splits: int,
    fingerprint: str,
    cluster: dict[str, Any],
) -> tuple[SearchRecorder, PriorRun | None, str | None]:
    """Open (with ``resume``, reopen) a multi-fidelity experiment; its schedule recorded.

    The configuration holds the schedule (:func:`~dmlsearch._schedule_plan.schedule_spec`),
    so a resume with another schedule, or of an experiment run without one, is refused
    before anything changes. Returns what :func:`dmlsearch._search_recording.open_search_experiment` does.
    """
    from ._schedule_plan import schedule_spec
    from .registry import NotFoundError

    config = {**config_snapshot(search, seed, n_splits), "schedule": schedule_spec(search)}
    if search.resume:
        try:
            stored = registry.store.get_experiment(name).config
        except NotFoundError:
            stored = None  # refused below, with the message plain searches give
        if stored is not None and "schedule" not in stored:
            if registry is not search.registry:
                registry.close()
            raise InvalidParameterError(
                "resume",
                f"experiment {name!r} ran without a scheduler, so it cannot be resumed as a "
                "multi-fidelity search: resume it without scheduler=, or start a new "
                "experiment (another experiment_name)",
            )
    return open_search_experiment(search, registry, name, primary, config, fingerprint, cluster)


def restore_steps(
    search: SearchCV,
    recorder: SearchRecorder,
    prior: PriorRun,
    previous_status: str | None,
    strategy: Strategy,
    space: Any,
    n_splits: int,
) -> list[RungResult]:
    """Every rung step the earlier run recorded, with its trial's parameters checked.

    A trial this search would give other parameters is refused, as a plain resume does
    (the experiment keeps its status); one beyond this search's trials is left out.
    """
    out: list[RungResult] = []
    for record in prior.trials:
        params = recorded_search_params(search, record, strategy, space, recorder, previous_status)
        if params is None:
            continue
        try:
            out.extend(steps_from_record(record, params, n_splits, search.return_train_score))
        except InvalidParameterError:
            recorder.close(previous_status or "interrupted")
            raise
    return out
