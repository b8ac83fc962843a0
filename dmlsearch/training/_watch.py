"""On the driver: a training job as the dashboard's ``/dmlsearch`` page shows it.

Rank 0 puts its latest epochs' figures in a Dask Variable after each epoch
(:func:`~dmlsearch.training._rank.report_epochs`); the driver reads it every second while
it watches the gang, and sends what is new through the dashboard's reporter (RPC calls to
the scheduler's handler, which never raise into the caller). The page is a view: nothing
here ever fails a fit.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any

from distributed import Client, Variable

from .._dask_config import config_flag

__all__ = ["JobWatch"]

logger = logging.getLogger("dmlsearch")


class JobWatch:
    """One job's panel on the page: its meta, ranks, epochs and end; inert without a page."""

    def __init__(self, client: Client, reporter: Any) -> None:
        self.client = client
        self.reporter = reporter
        self.variable: Variable | None = None
        self.sent = 0  # the last epoch sent

    @classmethod
    def start(cls, client: Client, name: str, meta: dict[str, Any]) -> JobWatch:
        """Open the job's panel, unless the Dask config ``dmlsearch.dashboard`` is False."""
        reporter = None
        if config_flag("dmlsearch.dashboard"):
            from ..dashboard import DashboardReporter, page_link

            try:
                reporter = DashboardReporter.attach(client, name, meta)
            except Exception as exc:  # the page is a view: it never fails a fit
                logger.warning("dmlsearch: the dashboard page is off for %s: %r", name, exc)
            link = getattr(client, "dashboard_link", None)
            if reporter is not None and link:
                logger.info("dmlsearch: live page of %s at %s", name, page_link(link))
        return cls(client, reporter)

    def new_run(self, workers: list[str], start_epoch: int) -> str | None:
        """Ranks start on ``workers`` from ``start_epoch``; the Variable rank 0 reports to."""
        if self.reporter is None:
            return None
        self._drop_variable()
        self.sent = start_epoch
        self.reporter.ranks_started(workers, start_epoch)
        self.reporter.flush()
        try:
            variable = Variable(f"dmlsearch-epochs-{uuid.uuid4().hex}", client=self.client)
            variable.set(None)
        except Exception as exc:
            self._no_epochs(exc)
            return None
        self.variable = variable
        return str(variable.name)

    def poll(self) -> None:
        """Send the epochs rank 0 reported since the last poll (on the gang's ticks)."""
        if self.reporter is None or self.variable is None:
            return
        try:
            value = self.variable.get(timeout=5)
            if value:
                self.epochs(value["history"])
            self.reporter.tick()
        except Exception as exc:
            self._no_epochs(exc)

    def epochs(self, history: list[dict[str, Any]]) -> None:
        """Send the epochs of ``history`` after the last one sent."""
        if self.reporter is None:
            return
        for figures in history:
            if int(figures["epoch"]) > self.sent:
                self.reporter.epoch_finished(figures)
                self.sent = int(figures["epoch"])

    def finish(self, status: str) -> None:
        """The job ended (``complete``, ``failed``, ``interrupted``): close its panel."""
        self._drop_variable()
        if self.reporter is not None:
            with contextlib.suppress(Exception):
                self.reporter.experiment_finished(status)

    def _drop_variable(self) -> None:
        if self.variable is not None:
            with contextlib.suppress(Exception):  # a closed client: the scheduler went with it
                self.variable.delete()
            self.variable = None

    def _no_epochs(self, exc: BaseException) -> None:
        """Rank 0's epochs cannot be read: the page gets them when the job ends."""
        logger.warning("dmlsearch: the dashboard page shows this job's epochs at its end: %r", exc)
        self._drop_variable()
