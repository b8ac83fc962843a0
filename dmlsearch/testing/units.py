"""A minimal kind of unit and a wave-by-wave source, for testing the runner's loop.

They live in the package (not in tests/) so that worker processes can unpickle them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ..runner.reports import report_progress
from ..runner.units import DONE, WAIT, Unit, UnitKind, UnitPolicy, UnitSource, _Signal

__all__ = [
    "PowerKind",
    "PruningSource",
    "SteppingKind",
    "WaveSource",
    "power_units",
    "stepping_units",
]


def power_units(
    exponent: int, payloads: list[tuple[int, float]], start_by: Any, stop_by: Any
) -> list[tuple[int, int]]:
    """``(x, x ** exponent)`` for each ``(x, seconds)`` payload, sleeping ``seconds`` first."""
    out = []
    for x, seconds in payloads:
        if start_by is not None and time.time() >= start_by:
            break
        time.sleep(seconds)
        out.append((x, x**exponent))
    return out


class PowerKind(UnitKind[tuple[int, float], tuple[int, int]]):
    """Raises each unit's number to ``exponent`` (a shared object, scattered once)."""

    name = "power"

    def __init__(self, exponent: int = 2, policy: UnitPolicy | None = None) -> None:
        super().__init__(policy)
        self.exponent = exponent

    def function(self) -> Callable[..., Sequence[tuple[int, int]]]:
        return power_units

    def shared(self) -> tuple[Any, ...]:
        return (self.exponent,)

    def result_id(self, result: tuple[int, int]) -> int:
        return result[0]

    def failed(self, unit: Unit[tuple[int, float]], state: str, error: str) -> tuple[int, int]:
        return (unit.payload[0], -1)

    def duration(self, result: tuple[int, int]) -> float | None:
        return 0.001


class WaveSource(UnitSource[tuple[int, float], tuple[int, int]]):
    """Proposes ``n`` units in waves of ``wave``: a wave starts once the last is recorded."""

    def __init__(self, n: int, wave: int, seconds: float = 0.0) -> None:
        self.n = n
        self.wave = wave
        self.seconds = seconds
        self.proposed = 0
        self.results: dict[int, int] = {}
        self.record_calls = 0
        self.waits = 0

    @property
    def total(self) -> int:
        return self.n

    @property
    def remaining(self) -> int:
        return self.n - self.proposed

    def propose(self) -> Unit[tuple[int, float]] | _Signal:
        if self.proposed >= self.n:
            return DONE
        if self.proposed % self.wave == 0 and len(self.results) < self.proposed:
            self.waits += 1
            return WAIT
        x = self.proposed
        self.proposed += 1
        return Unit(x, (x, self.seconds))

    def record(self, unit: Unit[tuple[int, float]], result: tuple[int, int], retries: int) -> float:
        self.record_calls += 1
        self.results[result[0]] = result[1]
        return float(result[1])


def stepping_units(
    payloads: list[tuple[int, int, float]], start_by: Any, stop_by: Any
) -> list[tuple[int, int]]:
    """For each ``(x, steps, seconds)``: report each step to the driver, sleeping between."""
    out = []
    for x, steps, seconds in payloads:
        for step in range(steps):
            report_progress(x, step=step)
            time.sleep(seconds)
        out.append((x, steps))
    return out


class SteppingKind(UnitKind[tuple[int, int, float], tuple[int, int]]):
    """Units that report progress as they go (a stand-in for intermediate scores)."""

    name = "stepping"

    def function(self) -> Callable[..., Sequence[tuple[int, int]]]:
        return stepping_units

    def result_id(self, result: tuple[int, int]) -> int:
        return result[0]

    def failed(self, unit: Unit[tuple[int, int, float]], state: str, error: str) -> tuple[int, int]:
        return (unit.payload[0], -1)


class PruningSource(UnitSource[tuple[int, int, float], tuple[int, int]]):
    """Proposes units ``0..n-1``; cancels unit ``victim`` once it reports step ``at_step``."""

    def __init__(self, n: int, steps: int, seconds: float, victim: int, at_step: int) -> None:
        self.n, self.steps, self.seconds = n, steps, seconds
        self.victim, self.at_step = victim, at_step
        self.proposed = 0
        self.reports: list[tuple[int, int]] = []
        self.results: dict[int, int] = {}
        self._cancel: list[int] = []

    def propose(self) -> Unit[tuple[int, int, float]] | _Signal:
        if self.proposed >= self.n:
            return DONE
        x = self.proposed
        self.proposed += 1
        return Unit(x, (x, self.steps, self.seconds))

    def reported(self, unit: Unit[tuple[int, int, float]], message: dict[str, Any]) -> None:
        self.reports.append((unit.id, int(message["step"])))  # type: ignore[arg-type]
        if unit.id == self.victim and message["step"] >= self.at_step:
            self._cancel.append(unit.id)

    def cancellations(self) -> list[Hashable]:
        out: list[Hashable] = list(self._cancel)
        self._cancel.clear()
        return out

    def record(
        self, unit: Unit[tuple[int, int, float]], result: tuple[int, int], retries: int
    ) -> None:
        self.results[result[0]] = result[1]
        return None
