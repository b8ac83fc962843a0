"""Exception types raised by dmlsearch.

Every error that a user can fix is one of ours, with a message that names what to change.
"""

from __future__ import annotations

__all__ = [
    "AllTrialsFailedError",
    "DmlsearchError",
    "GangError",
    "GangWorkerLostError",
    "InvalidParameterError",
    "JobCompleteError",
    "NoWorkersError",
    "NonFiniteOutputError",
    "NotSupportedError",
    "SchedulerLostError",
    "SearchSpaceError",
    "TrainingError",
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


class JobCompleteError(DmlsearchError):
    """A training job asked to resume has finished already: there is nothing to train.

    ``experiment`` names it. Not a failure: ``dmlsearch resume`` says so and exits 0.
    """

    def __init__(self, experiment: str, message: str) -> None:
        self.experiment = experiment
        super().__init__(message)


class NoWorkersError(DmlsearchError, RuntimeError):
    """The cluster had no workers for longer than the runner waits for one."""


class GangError(DmlsearchError, RuntimeError):
    """A collective job (a gang of ranks on reserved workers) failed as a whole.

    A rank raised, a rank's worker left the cluster, or the job ran past its timeout; the
    other ranks were cancelled and the workers' reservation released. ``worker`` is the
    address of the worker lost (or whose rank raised), ``rank`` its rank, when known.
    """

    def __init__(self, message: str, *, worker: str | None = None, rank: int | None = None):
        self.worker = worker
        self.rank = rank
        super().__init__(message)


class TrainingError(GangError):
    """Data-parallel training failed; ``checkpoint`` is the last checkpoint taken, or None."""

    def __init__(
        self,
        message: str,
        *,
        worker: str | None = None,
        rank: int | None = None,
        checkpoint: object | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        super().__init__(message, worker=worker, rank=rank)


class NonFiniteOutputError(DmlsearchError, ValueError):
    """A model's predictions are NaN or infinite: its fit diverged (NaN weights), or the
    rows predicted hold NaN or infinite values. Raised instead of returning them, so that a
    search scores such a trial as failed rather than as the class an argmax of NaN gives."""


class NotSupportedError(DmlsearchError, NotImplementedError):
    """A documented option that dmlsearch does not implement (yet); the message says what does."""


class GangWorkerLostError(GangError):
    """A gang's rank was lost with its worker (``worker``), not by raising."""


class SchedulerLostError(DmlsearchError, RuntimeError):
    """The Dask scheduler stopped answering during a run (killed, its machine lost).

    What was recorded before stays recorded; with a registry, start a new cluster and run
    again with ``resume=True`` to finish.
    """
