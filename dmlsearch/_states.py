"""The states a recorded unit of work (a trial, an ensemble member) ends in."""

from __future__ import annotations

__all__ = ["CANCELLED", "COMPLETE", "FAILED", "STOPPED", "TIMEOUT"]

#: Ran to the end and scored.
COMPLETE = "complete"
#: Raised, or was lost with its worker more often than allowed.
FAILED = "failed"
#: Ran past its own timeout (``trial_timeout``).
TIMEOUT = "timeout"
#: Still running when the time budget ran out, and stopped.
STOPPED = "stopped"
#: Cancelled by its source before it ended (a scheduler stopping a poor trial, say).
CANCELLED = "cancelled"
