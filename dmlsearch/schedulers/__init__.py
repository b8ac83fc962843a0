"""Multi-fidelity schedulers: WHEN a trial starts, is promoted to more budget, or stops.

Pure policies over an immutable :class:`History`; no Dask import (see
``docs/multifidelity.md``). ``SearchCV(scheduler=...)`` runs them on the cluster
(:mod:`dmlsearch.runner.rungs`).
"""

from __future__ import annotations

from typing import Any

from ..exceptions import InvalidParameterError
from ._base import (
    DONE,
    WAIT,
    Decision,
    History,
    Promote,
    Result,
    Scheduler,
    Signal,
    Start,
    Stop,
    rank,
)
from .asha import ASHA, asha_keeps, asha_last_promotion, asha_promotable
from .halving import (
    SuccessiveHalving,
    check_schedule,
    promotion_quota,
    rung_resources,
    rung_sizes,
    s_max,
)
from .hyperband import (
    Bracket,
    Hyperband,
    assign_brackets,
    hyperband_brackets,
    weighted_round_robin,
)
from .median import MedianStopping, median_stop

__all__ = [
    "ASHA",
    "DONE",
    "SCHEDULERS",
    "WAIT",
    "Bracket",
    "Decision",
    "History",
    "Hyperband",
    "MedianStopping",
    "Promote",
    "Result",
    "Scheduler",
    "Signal",
    "Start",
    "Stop",
    "SuccessiveHalving",
    "asha_keeps",
    "asha_last_promotion",
    "asha_promotable",
    "assign_brackets",
    "check_schedule",
    "hyperband_brackets",
    "make_scheduler",
    "median_stop",
    "promotion_quota",
    "rank",
    "rung_resources",
    "rung_sizes",
    "s_max",
    "weighted_round_robin",
]

_CLASSES: dict[str, type[Scheduler]] = {
    "asha": ASHA,
    "hyperband": Hyperband,
    "halving": SuccessiveHalving,
    "median": MedianStopping,
}

#: Every name ``make_scheduler`` accepts.
SCHEDULERS: tuple[str, ...] = tuple(_CLASSES)


def make_scheduler(scheduler: Any, **params: Any) -> Scheduler:
    """The scheduler named ``scheduler`` built with ``params``, or a :class:`Scheduler` as is.

    Raises :class:`InvalidParameterError` for an unknown name or a bad parameter.
    """
    if isinstance(scheduler, Scheduler):
        return scheduler
    if not isinstance(scheduler, str) or scheduler.lower() not in _CLASSES:
        raise InvalidParameterError(
            "scheduler",
            f"unknown scheduler {scheduler!r}; choose one of {list(SCHEDULERS)} or pass a "
            "dmlsearch.schedulers.Scheduler",
        )
    cls = _CLASSES[scheduler.lower()]
    try:
        return cls(**params)
    except TypeError as exc:
        raise InvalidParameterError("scheduler", f"{scheduler!r}: {exc}") from None
