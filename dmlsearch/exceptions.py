"""Exception types raised by dmlsearch.

Every error that a user can fix is one of ours, with a message that names what to change.
"""

from __future__ import annotations

__all__ = [
    "AllTrialsFailedError",
    "DmlsearchError",
    "InvalidParameterError",
    "NoWorkersError",
    "SearchSpaceError",
    "TrialTimeoutError",
]


class DmlsearchError(Exception):
    """Base class of every error dmlsearch raises on purpose."""


class InvalidParameterError(DmlsearchError, ValueError):
    """A parameter given by the user is invalid; raised before any work is dispatched.

    ``param`` names the offending parameter so tools (and tests) can point at it.
    """

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        super().__init__(f"{param}: {message}")


class SearchSpaceError(InvalidParameterError):
    """A search space (or one of its dimensions) is malformed."""


class AllTrialsFailedError(DmlsearchError, ValueError):
    """Every trial of a search raised; nothing can be ranked or refitted."""


class TrialTimeoutError(DmlsearchError):
    """A trial ran past ``trial_timeout`` and was stopped.

    Deliberately not a ``TimeoutError`` (an ``OSError``): ``except OSError`` in an
    estimator's own code must not swallow it.
    """


class NoWorkersError(DmlsearchError, RuntimeError):
    """The cluster had no workers for longer than the runner waits for one."""
