"""On the driver: run a fixed list of ensemble units through the runner's one loop."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Hashable
from typing import Any, Protocol

import dask
from distributed import Client

from .._dask_config import config_flag
from .._search_support import page_told
from ..runner.loop import RunStats, WorkLoop
from ..runner.units import DONE, Unit, UnitKind, UnitPolicy, UnitSource, _Signal
from ._members import MemberError, MemberFitError, MemberLostError, MemberResult

__all__ = ["MemberSource", "member_policy", "run_members"]

logger = logging.getLogger("dmlsearch")


class _Watcher(Protocol):
    """What the dashboard's reporter hears of an ensemble fit (numbers: unit order)."""

    def units_submitted(self, units: list[tuple[int, dict[str, Any]]]) -> None: ...

    def unit_finished(
        self, number: int, state: str, value: Any, worker: Any, duration: Any, error: str | None
    ) -> None: ...

    def tick(self) -> None: ...


def member_policy() -> UnitPolicy:
    """Members are retried when their worker is lost, batched when cheap, never timed out."""
    return UnitPolicy(max_retries=2, timeout=None, batchable=True, report_starts=True)


class MemberSource(UnitSource[Any, MemberResult]):
    """Proposes a known list of units in order; a unit that failed ends the fit.

    ``describe(unit_id)`` names a unit in the error raised for it (``"bagging member 3"``).
    """

    def __init__(
        self,
        units: list[Unit[Any]],
        describe: Callable[[Hashable], str],
        watcher: _Watcher | None = None,
    ) -> None:
        self.units = units
        self.describe = describe
        self.watcher = watcher
        self.number = {unit.id: i for i, unit in enumerate(units)}
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

    def submitted(self, units: list[Unit[Any]]) -> None:
        if self.watcher is not None:
            self.watcher.units_submitted(
                [(self.number[u.id], {"member": self.describe(u.id)}) for u in units]
            )

    def record(self, unit: Unit[Any], result: MemberResult, retries: int) -> None:
        if self.watcher is not None:
            state = "failed" if result.error is not None else result.state
            self.watcher.unit_finished(
                self.number[unit.id], state, None, result.worker, result.duration, result.error
            )
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
    meta: dict[str, Any] | None = None,
) -> tuple[dict[Hashable, MemberResult], RunStats]:
    """Run ``units`` of ``kind`` on ``client``; results by unit id, and the loop's counters.

    The fit shows on the dashboard's ``/dmlsearch`` page as ``name`` plus a short run id
    (members done / total, per worker), with ``meta`` (estimator, kind) in its header,
    unless the Dask config ``dmlsearch.dashboard`` is False.
    """
    reporter = _reporter(client, name, meta or {}, len(units))
    source = MemberSource(units, describe, reporter)
    loop: WorkLoop[Any, MemberResult] = WorkLoop(
        client,
        kind,
        source,
        name=name,
        no_workers_timeout=float(dask.config.get("dmlsearch.no-workers-timeout", 60.0)),
        on_tick=None if reporter is None else reporter.tick,
    )
    with page_told(reporter):
        stats = loop.run()
    return source.results, stats


def _reporter(client: Client, name: str, meta: dict[str, Any], total: int) -> Any:
    if not config_flag("dmlsearch.dashboard"):
        return None
    from ..dashboard import DashboardReporter

    try:
        return DashboardReporter.attach(
            client, f"{name} {uuid.uuid4().hex[:6]}", {**meta, "total": total}
        )
    except Exception as exc:  # the page is a view: it never fails a fit
        logger.warning("dmlsearch: the dashboard page is off for %s: %r", name, exc)
        return None
