"""What the futures loop knows of the cluster: its worker threads and the shared data.

Split from :mod:`.loop` so that the loop holds the units' bookkeeping and this module
the two things it keeps up to date about the cluster: how many tasks it can run at once
(and whether it has had no worker for too long), and the futures of the objects every
task shares (scattered once, sent again when a worker's death took them).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from distributed import Client, Future
from distributed.comm.core import CommClosedError

from ..exceptions import NoWorkersError
from .cluster import wait_for_a_worker

__all__ = ["SharedData", "Slots"]

logger = logging.getLogger("dmlsearch")


@dataclass
class Slots:
    """The cluster's worker threads, re-read at most every ``every`` seconds.

    With none for ``no_workers_timeout`` seconds, :meth:`refresh` raises
    :class:`~dmlsearch.exceptions.NoWorkersError` naming the run.
    """

    client: Client
    name: str
    no_workers_timeout: float
    every: float = 2.0
    count: int = 1
    checked: float = -float("inf")
    no_workers_since: float | None = None

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.checked < self.every:
            return
        self.checked = now
        try:
            threads = sum(self.client.nthreads().values())
        except Exception:  # the scheduler is busy or gone: keep the last figure
            return
        if threads > 0:
            self.count = threads
            self.no_workers_since = None
            return
        if self.no_workers_since is None:
            self.no_workers_since = now
        elif now - self.no_workers_since > self.no_workers_timeout:
            raise NoWorkersError(
                f"the cluster has had no workers for {self.no_workers_timeout:.0f} s "
                "(dmlsearch.no-workers-timeout), so "
                f"{self.name} cannot go on; start workers (or check why they die) and "
                "resume it (finished work stays recorded)"
            )

    def wait_for_a_worker(self) -> None:
        """Wait up to ``no_workers_timeout`` for a cluster that has no worker yet (an
        adaptive one scales up for the task that waits meanwhile, never for the shared data
        that goes first)."""
        if self.no_workers_since is None:  # refresh found threads
            return
        wait_for_a_worker(self.client, self.no_workers_timeout, self.name)
        self.refresh(force=True)


@dataclass
class SharedData:
    """The objects every task of a run takes, on every worker, as futures.

    ``rescattered`` counts the times they were sent again after a loss.
    """

    client: Client
    name: str
    no_workers_timeout: float
    objects: tuple[Any, ...] = ()
    futures: list[Future] = field(default_factory=list)
    rescattered: int = 0

    def ensure(self, verify: bool = False) -> list[Future]:
        """The futures, scattered again if the cluster lost them.

        ``verify`` asks the scheduler who holds them, for when a crash has just happened:
        a future's status can still read "finished" for a moment after its data is gone.
        """
        whole = bool(self.futures) and all(f.status == "finished" for f in self.futures)
        if whole and (not verify or self._held()):
            return self.futures
        if self.futures:
            # The data went with a worker (or was never whole): send it again.
            self.client.cancel(self.futures)
            self.rescattered += 1
        self.futures = [self._scatter_one(obj) for obj in self.objects]
        return self.futures

    def lost(self) -> bool:
        """Whether the cluster has lost part of the data."""
        return any(f.status != "finished" for f in self.futures)

    def release(self) -> None:
        if self.futures:
            self.client.cancel(self.futures)
        # The run's data goes with the run: a loop kept alive after it (by the traceback of
        # an error it raised) must not keep the user's X and y.
        self.futures, self.objects = [], ()

    def _held(self) -> bool:
        try:
            holders = self.client.who_has(self.futures)
        except Exception:  # cannot tell: the status said finished, go by it
            return True
        return all(holders.get(f.key) for f in self.futures)

    def _scatter_one(self, obj: Any) -> Future:
        """Send ``obj`` to every worker; wait for a live one up to ``no_workers_timeout``."""
        deadline = time.monotonic() + self.no_workers_timeout
        delay = 0.25
        while True:
            try:
                # hash=False: tokenizing a large array costs a full pass over it.
                # direct: straight to the workers, no copy through the scheduler.
                # broadcast: a worker that dies (a unit crashing it, say) takes no data
                # with it, so the other workers' tasks carry on.
                return self.client.scatter(
                    [obj],
                    hash=False,
                    direct=True,
                    broadcast=True,
                    timeout=max(1.0, min(15.0, self.no_workers_timeout / 4)),
                )[0]
            except (CommClosedError, OSError, KeyError) as exc:
                # The scheduler may still list a worker that has just died (KeyError: it
                # left while the scheduler copied the data to every worker), or none may
                # be up yet after a crash: wait for the cluster to recover, within reason.
                if time.monotonic() > deadline:
                    raise NoWorkersError(
                        f"could not send {self.name}'s data to any worker for "
                        f"{self.no_workers_timeout:.0f} s (dmlsearch.no-workers-timeout; "
                        f"{exc}); check that the cluster has live workers, not paused ones "
                        "(a worker past its memory limit's pause threshold takes no data), "
                        "and resume it (finished work stays recorded)"
                    ) from exc
                logger.warning(
                    "dmlsearch: could not send %s's data to a worker (%s); trying again",
                    self.name,
                    exc,
                )
                time.sleep(delay)
                delay = min(delay * 2, 4.0)
