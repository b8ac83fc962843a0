"""Preloaded into the embedded cluster's worker processes (``dask_setup``).

When the embedded cluster closes, its scheduler can stop while a worker's heartbeat is on
its way; distributed then logs "Failed to communicate with scheduler during heartbeat"
with a traceback on the user's terminal, at the end of a search that went well. The
driver reports a scheduler that is really lost itself (``SchedulerLostError``), so on
these workers the message is dropped.
"""

from __future__ import annotations

import logging
from typing import Any

_HEARTBEAT_LOST = "Failed to communicate with scheduler during heartbeat"


def _not_heartbeat_loss(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_HEARTBEAT_LOST)


def dask_setup(worker: Any) -> None:
    logger = logging.getLogger("distributed.worker")
    if _not_heartbeat_loss not in logger.filters:
        logger.addFilter(_not_heartbeat_loss)
