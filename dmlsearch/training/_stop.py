"""How the driver stops a job's ranks (runs on the driver and on workers).

Dask cannot stop a running task: a rank of a job whose driver was interrupted, or whose
other rank failed, trained on to its last epoch and held its worker (the next gang job
waited ``start_timeout`` for it, then failed). So the driver raises a ``distributed.Event``
when ``gang.run`` ends in an error, and each rank looks at it at most once a second (one
small scheduler round trip) and raises :class:`~dmlsearch.exceptions.GangError` when it is
set; its peers then fail in their next collective, as for any failed rank.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid

from ..exceptions import GangError

__all__ = ["StopSignal", "forget_arrivals", "meet", "new_stop_event", "stop_ranks"]

logger = logging.getLogger(__name__)

#: Seconds between a rank's looks at the Event.
CHECK_EVERY = 1.0


def new_stop_event() -> str:
    """A fresh Event name for one run of a job's ranks."""
    return f"dmlsearch-stop-{uuid.uuid4().hex[:12]}"


def stop_ranks(client: object, name: str | None) -> None:
    """On the driver: tell the ranks of ``name`` to stop (best effort: a cluster that is
    going has no ranks left to tell). The Event stays set: a rank may look late."""
    if name is None:
        return
    from distributed import Event

    try:
        Event(name, client=client).set()
    except Exception as exc:
        logger.warning("dmlsearch: could not tell the ranks to stop: %r", exc)


class StopSignal:
    """On a rank: :meth:`check` raises once the driver has raised Event ``name``."""

    def __init__(self, name: str | None, every: float = CHECK_EVERY) -> None:
        self.name = name
        self.every = every
        self._next = time.monotonic() + every

    def check(self) -> None:
        if self.name is None:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every
        stopped = False
        with contextlib.suppress(Exception):  # the scheduler is going: the collectives tell
            from distributed import Event

            stopped = bool(Event(self.name).is_set())
        if stopped:
            raise GangError("the driver stopped the job (it was interrupted, or a rank failed)")


def _arrival(name: str, rank: int) -> str:
    return f"{name}-at-{rank}"


def meet(name: str | None, rank: int, world_size: int, timeout: float) -> None:
    """On a rank, before torch's rendezvous: wait until every rank of the job got there,
    looking at the job's stop Event meanwhile.

    The rendezvous waits in C for up to ``timeout``: a rank whose peer never started (its
    task cancelled by an interrupted driver before it ran) held its worker that long.
    """
    if name is None or world_size < 2:
        return
    from distributed import Event

    Event(_arrival(name, rank)).set()
    stop = StopSignal(name, every=0.0)
    ends = time.monotonic() + timeout
    for peer in range(world_size):
        arrived = Event(_arrival(name, peer))
        while not arrived.wait(timeout=0.5):
            stop.check()
            if time.monotonic() > ends:
                raise GangError(
                    f"rank {peer} did not reach the rendezvous within timeout={timeout:g} s",
                    rank=peer,
                )


def forget_arrivals(client: object, name: str | None, world_size: int) -> None:
    """On the driver, after a job: drop its ranks' arrival Events (best effort)."""
    if name is None:
        return
    from distributed import Event

    with contextlib.suppress(Exception):
        for rank in range(world_size):
            Event(_arrival(name, rank), client=client).clear()
