"""Progress display for long searches: trials done / total, failures, best so far."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["NullProgress", "RichProgress", "make_progress"]


class NullProgress:
    """Shows nothing (``progress=False``)."""

    def start(self, total: int | None, description: str) -> None:
        pass

    def update(self, done: int, failed: int, running: int, best: float | None) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class RichProgress(NullProgress):
    """A rich progress bar on stderr, refreshed at most ten times a second."""

    def __init__(self) -> None:
        from rich.console import Console

        self._console = Console(stderr=True)
        self._progress: Any = None
        self._task: Any = None
        self._last = 0.0
        self._values: dict[str, Any] = {}

    def start(self, total: int | None, description: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("running {task.fields[running]}  failed {task.fields[failed]}"),
            TextColumn("best {task.fields[best]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self._console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(
            description, total=total, running=0, failed=0, best="-"
        )

    def update(self, done: int, failed: int, running: int, best: float | None) -> None:
        if self._progress is None:
            return
        self._values = {
            "completed": done,
            "running": running,
            "failed": failed,
            "best": "-" if best is None else f"{best:.4g}",
        }
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        self._progress.update(self._task, **self._values)

    def message(self, text: str) -> None:
        self._console.print(text)

    def close(self) -> None:
        if self._progress is not None:
            if self._values:
                self._progress.update(self._task, **self._values)
            self._progress.stop()
            self._progress = None


def make_progress(progress: bool | None) -> NullProgress:
    """``None`` shows a bar only when stderr is a terminal."""
    if progress is None:
        progress = sys.stderr.isatty()
    return RichProgress() if progress else NullProgress()
