"""Progress display for long searches: trials done / total, failures, best so far."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["LineProgress", "NullProgress", "RichProgress", "make_progress"]


class NullProgress:
    """Shows nothing (``progress=False``)."""

    def start(self, total: int | None, description: str, done: int = 0) -> None:
        """``done``: units an earlier run finished (a resume)."""

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

    def start(self, total: int | None, description: str, done: int = 0) -> None:
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
            description, total=total, completed=done, running=0, failed=0, best="-"
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


class LineProgress(NullProgress):
    """Plain lines on stderr every ``interval`` seconds and at the end, for a stderr that
    is not a terminal (a batch job's log, a file): a bar there is one garbled line."""

    def __init__(self, interval: float = 30.0) -> None:
        self.interval = interval
        self._description = ""
        self._total: int | None = None
        self._start = self._last = 0.0
        self._state: tuple[int, int, int, float | None] | None = None

    def start(self, total: int | None, description: str, done: int = 0) -> None:
        self._description, self._total = description, total
        self._start = self._last = time.monotonic()
        self._state = (done, 0, 0, None)
        self._write("started")

    def update(self, done: int, failed: int, running: int, best: float | None) -> None:
        if self._state is None:
            return
        self._state = (done, failed, running, best)
        if time.monotonic() - self._last >= self.interval:
            self._write()

    def message(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._state is not None:
            self._write("ended")
            self._state = None

    def _write(self, event: str = "") -> None:
        assert self._state is not None
        self._last = time.monotonic()
        done, failed, running, best = self._state
        of = "" if self._total is None else f"/{self._total}"
        shown = "-" if best is None else f"{best:.4g}"
        elapsed = int(self._last - self._start)
        print(
            f"dmlsearch: {self._description}{' ' + event if event else ''}: {done}{of} done, "
            f"{running} running, {failed} failed, best {shown}, "
            f"{elapsed // 60}:{elapsed % 60:02d} elapsed",
            file=sys.stderr,
            flush=True,
        )


def make_progress(progress: bool | None) -> NullProgress:
    """A bar on a terminal; ``True`` elsewhere: a line every 30 s (:class:`LineProgress`);
    ``None`` shows the bar only when stderr is a terminal."""
    terminal = sys.stderr.isatty()
    if progress is None:
        progress = terminal
    if not progress:
        return NullProgress()
    return RichProgress() if terminal else LineProgress()
