"""On the driver: run a fixed list of ensemble units through the runner's one loop."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import dask
from distributed import Client

from ..runner.loop import RunStats, WorkLoop
from ..runner.units import DONE, Unit, UnitKind, UnitPolicy, UnitSource, _Signal
from ._members import MemberError, MemberFitError, MemberLostError, MemberResult

__all__ = ["MemberSource", "member_policy", "run_members"]


def member_policy() -> UnitPolicy:
    """Members are retried when their worker is lost, batched when cheap, never timed out."""
    return UnitPolicy(max_retries=2, timeout=None, batchable=True, report_starts=True)


class MemberSource(UnitSource[Any, MemberResult]):
    """Proposes a known list of units in order; a unit that failed ends the fit.

    ``describe(unit_id)`` names a unit in the error raised for it (``"bagging member 3"``).
    """

    def __init__(self, units: list[Unit[Any]], describe: Callable[[Hashable], str]) -> None:
        self.units = units
        self.describe = describe
        self.next = 0
        self.results: dict[Hashable, MemberResult] = {}

    @property
    def total(self) -> int:
        return len(self.units)

    @property
    def remaining(self) -> int:
        return len(self.units) - self.next

    def propose(self) -> Unit[Any] | _Signal:
        if self.next >= len(self.units):
            return DONE
        unit = self.units[self.next]
        self.next += 1
        return unit

    def record(self, unit: Unit[Any], result: MemberResult, retries: int) -> None:
        if result.error is not None:
            what = self.describe(unit.id)
            where = f" on worker {result.worker}" if result.worker else ""
            if result.raised:
                error: MemberError = MemberFitError(
                    what, f"{what} raised{where}:\n{result.error.rstrip()}"
                )
            else:  # the loop gave it up (lost with its worker too often)
                error = MemberLostError(
                    what, f"{what} could not run ({result.state}): {result.error}"
                )
            # Raised inside the loop: it cancels what is in flight and ends the fit.
            raise error from result.exception
        self.results[unit.id] = result
        return None


def run_members(
    client: Client,
    kind: UnitKind[Any, MemberResult],
    units: list[Unit[Any]],
    describe: Callable[[Hashable], str],
    name: str,
) -> tuple[dict[Hashable, MemberResult], RunStats]:
    """Run ``units`` of ``kind`` on ``client``; results by unit id, and the loop's counters."""
    source = MemberSource(units, describe)
    loop: WorkLoop[Any, MemberResult] = WorkLoop(
        client,
        kind,
        source,
        name=name,
        no_workers_timeout=float(dask.config.get("dmlsearch.no-workers-timeout", 60.0)),
    )
    stats = loop.run()
    return source.results, stats
