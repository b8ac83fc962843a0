"""The small report stream from workers to the driver.

A task calls :func:`report` (``"started"`` today; intermediate scores and rank progress
later); the message travels over the worker's batched stream to the scheduler's event
broker (a handler every scheduler has) and on to the one driver subscribed to the run's
topic. Nothing is sent when a run does not ask for reports.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from ..exceptions import TrialTimeoutError

__all__ = ["ReportStream", "report", "report_progress", "reporting_to", "wire_id"]

logger = logging.getLogger("dmlsearch")


def report(topic: str | None, kind: str, **fields: Any) -> None:
    """On a worker: tell the driver of ``topic`` that ``kind`` happened in this task.

    A no-op outside a Dask task or when ``topic`` is None; it never raises (a report is
    never worth failing the work for).
    """
    if topic is None:
        return
    try:
        from distributed import get_worker

        worker = get_worker()
        # The scheduler adds the sending worker's address ("worker") to the message.
        msg = {"kind": kind, "key": str(worker.get_current_task()), **fields}
        worker.log_event(topic, msg)
    except TrialTimeoutError:
        # The trial's deadline fired while it reported: swallowed here, the trial ran on
        # until its worker was restarted (one run of the suite in three, under load).
        raise
    except Exception:  # not in a worker, or the worker is closing
        return


_local = threading.local()


@contextlib.contextmanager
def reporting_to(topic: str | None) -> Iterator[None]:
    """On a worker: route :func:`report_progress` calls made in this thread to ``topic``."""
    previous = getattr(_local, "topic", None)
    _local.topic = topic
    try:
        yield
    finally:
        _local.topic = previous


def report_progress(unit: Hashable, **fields: Any) -> None:
    """From inside a kind's task function: tell the run's source something about ``unit``.

    ``fields`` must be msgpack-serialisable (numbers, strings, lists, dicts): an
    intermediate score, an epoch, a rank's progress. The source hears it through
    :meth:`UnitSource.reported`. A no-op outside a run's task.
    """
    report(getattr(_local, "topic", None), "progress", unit=unit, **fields)


def wire_id(unit_id: Any) -> str:
    """A unit id as it compares after a trip through msgpack (tuples come back as lists)."""
    return json.dumps(unit_id, sort_keys=True, default=str)


class _Inbox:
    """The handler a run gives the client for its topic: the messages' queue, and a weak
    reference to the run's callback. distributed's ``unsubscribe_topic`` (2026.8) leaves
    the handler in the client for good, so it must not hold the run (a search's loop, and
    its data, stayed in the driver's memory after every fit)."""

    def __init__(self, on_message: Callable[[], None] | None) -> None:
        self.queue: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.closed = False
        self._callback: Callable[[], Callable[[], None] | None] | None = None
        if on_message is not None:
            if hasattr(on_message, "__self__"):
                self._callback = weakref.WeakMethod(on_message)
            else:
                self._callback = lambda: on_message

    def __call__(self, event: Any) -> None:
        try:
            _, msg = event
        except (TypeError, ValueError):
            return
        if self.closed or not isinstance(msg, dict):
            return
        self.queue.put(msg)
        callback = None if self._callback is None else self._callback()
        if callback is not None:
            callback()


#: Seconds a closed run's topic keeps its do-nothing handler before it is dropped.
LATE_SECONDS = 30.0


def _late_message(event: Any) -> None:
    """The handler of a closed run's topic: a message that arrives after the run ended."""


def _forget(handlers: dict[Any, Any], topic: str) -> None:
    if handlers.get(topic) is _late_message:
        handlers.pop(topic, None)


class ReportStream:
    """On the driver: the reports of one run, read without blocking from the loop.

    ``subscribe`` registers a handler on the client's event loop that only puts each
    message in a thread-safe queue (and calls ``on_message``); :meth:`drain` empties it
    from the runner's thread.
    """

    def __init__(
        self, client: Any, topic: str, on_message: Callable[[], None] | None = None
    ) -> None:
        self.client = client
        self.topic = topic
        self._inbox = _Inbox(on_message)
        self._subscribed = False

    @property
    def subscribed(self) -> bool:
        return self._subscribed

    def subscribe(self) -> None:
        try:
            self.client.subscribe_topic(self.topic, self._inbox)
            self._subscribed = True
        except Exception as exc:  # a client without topics: timeouts fall back to submit time
            logger.warning("dmlsearch: cannot subscribe to worker reports: %s", exc)

    def drain(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            try:
                out.append(self._inbox.queue.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self._inbox.closed = True
        self.drain()
        if self._subscribed:
            # The client may be closing: then there is nothing to undo.
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic(self.topic)
            # ... which leaves the handler in the client (see _Inbox): put a function
            # that holds nothing in its place. Not nothing: a message already on its way
            # (a task that ended after the run) then made the client call
            # unsubscribe_topic again, which raised and logged an ERROR with a traceback.
            handlers = getattr(self.client, "_event_handlers", None)
            if isinstance(handlers, dict) and handlers.get(self.topic) is self._inbox:
                handlers[self.topic] = _late_message
                with contextlib.suppress(Exception):  # the client is closing: nothing left
                    loop = self.client.loop
                    topic = self.topic
                    loop.add_callback(
                        lambda: loop.call_later(LATE_SECONDS, _forget, handlers, topic)
                    )
            self._subscribed = False
