"""Stop flags the driver pushes to the worker running a task (runs on both sides).

A trial's ``should_stop()`` asked the scheduler for its ``distributed.Event`` at every
call: a round trip of 1 to 3 ms, made after every step by the usual objective (report,
then ask), which for xgboost rounds of a few milliseconds was a third of the trial's time.
Now the driver, when it stops a trial, also sends the flag to the worker the trial reported
from (``client.run``, without waiting), and the worker's check reads a dict in its own
process. The Event stays the authority: a check still asks the scheduler at most once a
``recheck`` (a task retried on another worker, a flag that did not arrive).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from typing import Any

__all__ = ["RECHECK", "StopCheck", "mark_stopped", "push_stop"]

logger = logging.getLogger("dmlsearch")

#: Seconds between a check's questions to the scheduler when no flag was pushed.
RECHECK = 1.0
#: Flags kept per worker process (oldest dropped): names are per run and trial, and a flag
#: may arrive after its task ended.
MAX_FLAGS = 10_000

_lock = threading.Lock()
_flags: OrderedDict[str, None] = OrderedDict()


def mark_stopped(name: str) -> None:
    """On a worker (sent by :func:`push_stop`): the stop Event ``name`` is set."""
    with _lock:
        _flags[name] = None
        while len(_flags) > MAX_FLAGS:
            _flags.popitem(last=False)


async def _mark_on_worker(name: str) -> None:
    # A coroutine: the only kind of function client.run runs without waiting for it.
    mark_stopped(name)


def forget(name: str) -> None:
    """On a worker: drop ``name``'s flag (its task ended)."""
    with _lock:
        _flags.pop(name, None)


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
