"""The function every task runs in, on a worker.

Kept apart from the loop so that a fresh worker unpickling it imports only this module,
the report helpers and the allocator setting, not the loop, the strategies or Optuna.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._malloc import malloc_tuned
from .reports import report, reporting_to

__all__ = ["execute"]


def execute(
    function: Callable[..., Sequence[Any]],
    topic: str | None,
    *args: Any,
) -> Sequence[Any]:
    """Announce the start, call the kind's function, announce the end.

    The end report tells the driver that a task lost later (its result went with its
    worker before the driver gathered it) did not crash that worker.
    """
    report(topic, "started")
    with reporting_to(topic), malloc_tuned():
        result = function(*args)
    report(topic, "done")
    return result
