"""Stop flags the driver pushes to the worker running a task (runs on both sides).

A trial's ``should_stop()`` asked the scheduler for its ``distributed.Event`` at every
call: a round trip of 1 to 3 ms, made after every step by the usual objective (report,
then ask), which for xgboost rounds of a few milliseconds was a third of the trial's time.
Now the driver, when it stops a trial, also sends the flag to the worker the trial reported
from (``client.run``, without waiting), and the worker's check reads a dict in its own
process. The Event stays the authority: a check still asks the scheduler at most once a
``recheck`` (a task retried on another worker, a flag that did not arrive).

A trial that reported at a rung waits, in its next ``should_stop()``, for the driver's
answer about that step (a stop, or "judged up to step s": :func:`push_go_on`), as Optuna's
``should_prune`` answers on the spot: without it a trial whose steps are quicker than the
round trip ran on past the rung that stopped it, or ended first.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from typing import Any

__all__ = [
    "RECHECK",
    "VERDICT_WAIT",
    "StopCheck",
    "forget",
    "mark_judged",
    "mark_stopped",
    "push_go_on",
    "push_stop",
]

logger = logging.getLogger("dmlsearch")

#: Seconds between a check's questions to the scheduler when no flag was pushed.
RECHECK = 1.0
#: Flags kept per worker process (oldest dropped): names are per run and trial, and a flag
#: may arrive after its task ended.
MAX_FLAGS = 10_000

#: Seconds a trial waits for the driver's answer about a judged report before it goes on
#: (a busy or lost driver; a stop may still come later).
VERDICT_WAIT = 1.0

_changed = threading.Condition()
_flags: OrderedDict[str, None] = OrderedDict()
#: The highest step of each trial the driver judged and let go on.
_verdicts: OrderedDict[str, int] = OrderedDict()


def _bound(entries: OrderedDict[str, Any]) -> None:
    while len(entries) > MAX_FLAGS:
        entries.popitem(last=False)


def mark_stopped(name: str) -> None:
    """On a worker (sent by :func:`push_stop`): the stop Event ``name`` is set."""
    with _changed:
        _flags[name] = None
        _bound(_flags)
        _changed.notify_all()


def mark_judged(name: str, step: int) -> None:
    """On a worker (sent by :func:`push_go_on`): ``name``'s report at ``step`` may go on."""
    with _changed:
        _verdicts[name] = max(step, _verdicts.get(name, step))
        _bound(_verdicts)
        _changed.notify_all()


async def _mark_on_worker(name: str) -> None:
    # A coroutine: the only kind of function client.run runs without waiting for it.
    mark_stopped(name)


async def _judged_on_worker(name: str, step: int) -> None:
    mark_judged(name, step)


def forget(name: str) -> None:
    """On a worker: drop ``name``'s flag and answers (its task ended)."""
    with _changed:
        _flags.pop(name, None)
        _verdicts.pop(name, None)


def push_go_on(client: Any, name: str, step: int, worker: str | None) -> None:
    """On the driver: tell ``worker`` that trial ``name``'s report at ``step`` was judged
    and it goes on (best effort: without it the trial waits ``VERDICT_WAIT``)."""
    if not worker:
        return
    try:
        client.run(_judged_on_worker, name, step, workers=[worker], wait=False)
    except Exception as exc:
        logger.debug("dmlsearch: no answer sent to %s: %r", worker, exc)


def push_stop(client: Any, name: str, worker: str | None) -> None:
    """On the driver: set Event ``name`` and send its flag to ``worker`` (best effort)."""
    from distributed import Event

    if worker:
        try:
            client.run(_mark_on_worker, name, workers=[worker], wait=False)
        except Exception as exc:  # the Event below still stops it, a check later
            logger.debug("dmlsearch: no stop flag sent to %s: %r", worker, exc)
    Event(name, client=client).set()


class StopCheck:
    """On a worker: whether the driver set Event ``name``, asking the scheduler only on the
    first call and then at most once a ``recheck`` seconds unless a flag was pushed."""

    def __init__(self, name: str | None, recheck: float = RECHECK) -> None:
        self.name = name
        self.recheck = recheck
        self._asked_at = -math.inf

    def answer(self, step: int, timeout: float = VERDICT_WAIT) -> bool:
        """After a judged report at ``step``: wait for the driver's answer; True if it
        stopped the trial. Without an answer within ``timeout``, what :meth:`is_set` says."""
        if self.name is None:
            return False
        ends = time.monotonic() + timeout
        with _changed:
            while True:
                if self.name in _flags:
                    return True
                if _verdicts.get(self.name, -1) >= step:
                    return False
                left = ends - time.monotonic()
                if left <= 0:
                    break
                # In slices: a trial's deadline (an exception sent to this thread) must
                # not wait behind a long lock wait.
                _changed.wait(min(left, 0.05))
        return self.is_set()

    def is_set(self) -> bool:
        if self.name is None:
            return False
        if self.name in _flags:
            return True
        now = time.monotonic()
        if now - self._asked_at < self.recheck:
            return False
        self._asked_at = now
        from distributed import Event

        try:
            return bool(Event(self.name).is_set())
        except BaseException:
            # Not asked after all (the trial's deadline fired during the round trip, or the
            # scheduler is going): the next call asks again.
            self._asked_at = -math.inf
            raise
