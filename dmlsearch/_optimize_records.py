"""The registry side of :func:`dmlsearch.optimize`: its experiment, and resuming it.

An optimize run records one trial per record (its value as the metric ``score``, its
reported values as ``intermediate``). That is all a resume needs: the pruners are pure
rules over the trials' curves, so a resumed run rebuilds them from the records, gives the
strategy the finished trials, and runs only the trials that were never recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._experiment import recorded_params
from ._objective import ObjectiveOutcome
from ._pruners import AshaPruner, HyperbandPruner, MedianPruner, Pruner
from ._search_support import strategy_name
from ._states import COMPLETE
from .exceptions import InvalidParameterError

if TYPE_CHECKING:
    from ._recording import SearchRecorder
    from .registry import TrialRecord
    from .strategies import Strategy

__all__ = ["check_same_run", "objective_name", "optimize_config", "restore_trials"]

_BUILT_IN = (AshaPruner, HyperbandPruner, MedianPruner)


def objective_name(objective: Any) -> str:
    """The objective as a resume compares it: its module and qualified name."""
    module = getattr(objective, "__module__", None) or ""
    qualname = getattr(objective, "__qualname__", None) or type(objective).__qualname__
    return f"{module}.{qualname}" if module else qualname


def optimize_config(
    *,
    objective: Any,
    space: Any,
    search_space: Any,
    strategy: Any,
    scheduler: Any,
    pruner: Pruner | None,
    direction: str,
    n_trials: int,
    seed: int,
) -> dict[str, Any]:
    """What the experiment records about the run (JSON-friendly).

    ``search_space_spec`` and ``schedule`` (the pruner with its settings, and the
    direction) are what a resume must not change, as for ``SearchCV``.
    """

    if pruner is None or isinstance(pruner, _BUILT_IN):
        described = repr(pruner)
    else:  # a user's pruner: its class (an object's repr may hold its address)
        described = objective_name(type(pruner))
    return {
        "kind": "optimize",
        "objective": repr(objective),
        "objective_name": objective_name(objective),
        "search_space": repr(space),
        "search_space_spec": search_space.describe(),
        "strategy": strategy_name(strategy),
        "scheduler": repr(scheduler),
        "schedule": {"pruner": described, "direction": direction},
        "direction": direction,
        "n_trials": n_trials,
        "seed": seed,
    }


def check_same_run(name: str, stored: dict[str, Any], config: dict[str, Any]) -> None:
    """Refuse to resume a ``SearchCV`` experiment, or one of another objective."""
    if stored.get("kind") != "optimize":
        raise InvalidParameterError(
            "resume",
            f"experiment {name!r} is a SearchCV search, not an optimize run: resume it with "
            "SearchCV, or choose another experiment_name",
        )
    if stored.get("objective_name", config["objective_name"]) != config["objective_name"]:
        raise InvalidParameterError(
            "resume",
            f"cannot resume experiment {name!r}: it tuned {stored['objective_name']}, not "
            f"{config['objective_name']}. Resume with the same objective, or start a new "
            "experiment (another experiment_name)",
        )


def outcome_from_record(record: TrialRecord, params: dict[str, Any]) -> ObjectiveOutcome:
    """Rebuild a trial an earlier run recorded (its value, state and curve)."""
    values = record.scores.get("score") or []
    curve = {int(k): float(v) for k, v in record.intermediate.items() if k.isdigit()}
    bracket = record.intermediate.get("bracket")
    return ObjectiveOutcome(
        number=record.number,
        params=params,
        seed=int(record.seed or 0),
        state=record.state,
        value=values[0] if values else None,
        intermediate=curve,
        started=float(record.started or 0.0),
        finished=float(record.finished or 0.0),
        worker=record.worker or "",
        error=record.error,
        retries=record.retries,
        bracket=None if bracket is None else int(bracket),
    )


def restore_trials(
    records: list[TrialRecord],
    strategy: Strategy,
    space: Any,
    sign: float,
    recorder: SearchRecorder,
    previous_status: str | None,
) -> list[ObjectiveOutcome]:
    """The trials an earlier run finished, each told to the strategy as finished.

    A record this run cannot give the same parameters is refused (the recorder is closed
    with the experiment's earlier status); a record beyond this run's trials is left out.
    """

    def refuse(message: str) -> InvalidParameterError:
        recorder.close(previous_status or "interrupted")
        return InvalidParameterError("resume", message)

    out = []
    for record in sorted(records, key=lambda r: r.number):
        params = recorded_params(record, strategy, space, recorder.name, refuse)
        if params is None:
            continue
        outcome = outcome_from_record(record, params)
        done = outcome.state == COMPLETE and outcome.value is not None
        strategy.restore(record.number, params, sign * outcome.value if done else None)  # type: ignore[operator]
        out.append(outcome)
    return out
