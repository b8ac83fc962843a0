"""The metadata store of the model registry: records, errors and the abstract store.

Artifacts (model files) live in a separate content-addressed blob store; this module only
knows their URI and sha256.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..exceptions import DmlsearchError, InvalidParameterError

if TYPE_CHECKING:
    import pandas as pd

    from .._evaluate import TrialOutcome

__all__ = [
    "COMPLETE",
    "FAILED",
    "RUNNING",
    "TIMEOUT",
    "AlreadyExistsError",
    "ExperimentRecord",
    "ModelSummary",
    "ModelVersionRecord",
    "NotFoundError",
    "RegistryError",
    "RegistryOpenError",
    "RegistryStore",
    "RegistryUnavailableError",
    "TrialRecord",
]

_Store = TypeVar("_Store", bound="RegistryStore")

# Trial states; the finished ones equal dmlsearch._evaluate's. Defined here rather than
# imported so that the registry does not pull in scikit-learn.
RUNNING = "running"
COMPLETE = "complete"
FAILED = "failed"
TIMEOUT = "timeout"


def _fold_mean(folds: Sequence[float]) -> float:
    """The mean of fold scores, exactly summed, as numpy's: an infinite score is kept (a
    search's ``best_score_`` may be one); NaN for a NaN fold or +inf beside -inf."""
    if any(math.isnan(s) for s in folds) or (math.inf in folds and -math.inf in folds):
        return math.nan  # math.fsum raises for inf + -inf
    return math.fsum(folds) / len(folds)


class RegistryError(DmlsearchError):
    """Base class of the registry's errors."""


class NotFoundError(RegistryError, KeyError):
    """An experiment, model, version or alias does not exist."""

    def __str__(self) -> str:
        # KeyError would print the message in quotes.
        return str(self.args[0]) if self.args else ""


class ExperimentDeletedError(RegistryError):
    """The experiment a run records was deleted from the registry under it (``dmlsearch
    delete --force``, ``run --overwrite --force``, :meth:`Registry.delete_experiment`): the
    run stops, as nothing more of it can be recorded."""


class AlreadyExistsError(RegistryError):
    """A name that must be unique is taken."""


class InUseError(RegistryError, ValueError):
    """A version cannot be deleted: other versions (ensembles) still load it."""


class RegistryOpenError(RegistryError):
    """The registry's database cannot be opened: a path that cannot be written (a read-only
    folder), a server that cannot be reached, a missing driver. The URL or the path is what
    to change; nothing was recorded."""


class RegistryUnavailableError(RegistryError):
    """The database could not be reached, or stayed locked past its timeout.

    The call that raised changed nothing and may be retried later (the search recorder
    does, with backoff).
    """


@dataclass(frozen=True)
class ExperimentRecord:
    """One experiment: a named search (or training run) and where it ran."""

    id: int
    name: str
    status: str
    created: float
    config: dict[str, Any]
    package_versions: dict[str, Any]
    data_fingerprint: str | None
    cluster: dict[str, Any]


@dataclass(frozen=True)
class TrialRecord:
    """One trial of an experiment, identified by ``(experiment_id, number)``.

    ``scores`` holds per-fold test scores by metric name; ``value`` is the objective
    (greater is better; NaN is stored as None); ``intermediate`` maps a budget (as a
    string) to the value reached at that budget.
    """

    experiment_id: int
    number: int
    state: str
    params: dict[str, Any]
    scores: dict[str, list[float]]
    value: float | None = None
    intermediate: dict[str, float] = field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    duration: float | None = None
    worker: str | None = None
    retries: int = 0
    error: str | None = None
    seed: int | None = None

    @classmethod
    def from_outcome(
        cls, experiment_id: int, outcome: TrialOutcome, *, metric: str = "score"
    ) -> TrialRecord:
        """Build the record of a finished :class:`~dmlsearch.TrialOutcome`.

        ``value`` is the mean over folds of ``metric`` (±inf when a fold's is), or None when
        the trial did not complete or the mean is NaN. Raises InvalidParameterError if a completed
        trial has no ``metric`` (``"score"`` is the name of a single scorer).
        """
        scores: dict[str, list[float]] = {}
        for fold in outcome.test_scores:
            for name, score in fold.items():
                scores.setdefault(name, []).append(float(score))
        if outcome.state == COMPLETE and scores and metric not in scores:
            raise InvalidParameterError(
                "metric", f"trial {outcome.number} has scores {sorted(scores)}, not {metric!r}"
            )
        folds = scores.get(metric, [])
        value: float | None = None
        if outcome.state == COMPLETE and folds:
            mean = _fold_mean(folds)
            value = None if math.isnan(mean) else mean
        return cls(
            experiment_id=experiment_id,
            number=outcome.number,
            state=outcome.state,
            params=dict(outcome.params),
            scores=scores,
            value=value,
            intermediate={},
            started=outcome.started,
            finished=outcome.finished,
            duration=outcome.duration,
            worker=outcome.worker,
            retries=outcome.retries,
            error=outcome.error,
            seed=outcome.seed,
        )


@dataclass(frozen=True)
class ModelVersionRecord:
    """One immutable version of a registered model.

    ``lineage`` says where it came from: trial number, experiment id and data fingerprint,
    or the member versions of an ensemble. ``trusted_types`` lists the types a loader may
    instantiate (for formats such as skops). ``aliases`` are sorted.
    """

    model: str
    version: int
    artifact_uri: str
    sha256: str
    format: str
    metrics: dict[str, Any]
    signature: dict[str, Any] | None
    lineage: dict[str, Any]
    trusted_types: list[str]
    tags: dict[str, str]
    aliases: list[str]
    created: float


@dataclass(frozen=True)
class ModelSummary:
    """One registered model: its latest version, how many versions, and its aliases.

    ``aliases`` maps each alias to the version it points at. ``created`` is when the model
    was first registered, ``updated`` when its latest version was.
    """

    name: str
    latest_version: int | None
    n_versions: int
    aliases: dict[str, int]
    created: float
    updated: float | None


class RegistryStore(abc.ABC):
    """Where experiments, trials and model versions are recorded.

    Contract every implementation keeps:

    * Thread safety: one store object may be used from several threads of one process at
      once. Processes (the driver, CLI, dashboard, other hosts) share state only through the
      database, never through the object; each process opens its own store.
    * Writers never lose a write: a call that returns has committed; a call that raises
      has changed nothing. Each write primitive is one transaction.
    * Version numbers of a model are unique and increase (1, 2, ...) even under concurrent
      writers in several processes; a deleted version's number is never reused.
    * All timestamps are UTC POSIX seconds as floats (``time.time()``).
    * Experiment, model, alias and tag-key names of up to ``_checks.MAX_NAME`` (256)
      characters are stored whole; longer ones are refused before any write.
    * Free text (trial errors and workers, tag values) is stored with NUL and lone
      surrogates as U+FFFD; JSON values keep them exactly.
    * A write whose target is deleted meanwhile raises NotFoundError, never a driver
      error; a write to a read-only database raises RegistryError saying so.
    * Records returned are snapshots: changing one changes nothing in the store.
    * JSON-valued fields round-trip ints, floats (NaN and infinities included), strings,
      bools, None, lists and str-keyed dicts; tuples come back as lists, numpy scalars and
      arrays as Python numbers and lists, other objects as their ``repr``.

    Only the primitives are abstract; conveniences (``get_or_create_experiment``,
    ``trials_dataframe``, ``model_summaries``) are built on them.
    """

    # -- registry metadata ---------------------------------------------------------------

    @abc.abstractmethod
    def get_meta(self, key: str) -> str | None:
        """A value the registry keeps about itself (its id, its artifact store), or None."""

    @abc.abstractmethod
    def setdefault_meta(self, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless a value is already there; return the stored one.

        Atomic under concurrent writers: every caller gets the same (first) value.
        Raises InvalidParameterError if ``key`` is empty or over 64 characters.
        """

    # -- experiments ---------------------------------------------------------------------

    @abc.abstractmethod
    def create_experiment(
        self,
        name: str,
        *,
        config: Mapping[str, Any] | None = None,
        package_versions: Mapping[str, Any] | None = None,
        data_fingerprint: str | None = None,
        cluster: Mapping[str, Any] | None = None,
    ) -> ExperimentRecord:
        """Create an experiment with status ``"running"``.

        Raises AlreadyExistsError if ``name`` is taken and InvalidParameterError if it is
        empty or longer than 256 characters.
        """

    @abc.abstractmethod
    def get_experiment(self, name_or_id: str | int) -> ExperimentRecord:
        """The experiment with this name (str) or id (int); raises NotFoundError."""

    @abc.abstractmethod
    def list_experiments(self) -> list[ExperimentRecord]:
        """Every experiment, oldest (lowest id) first."""

    @abc.abstractmethod
    def set_experiment_status(self, experiment_id: int, status: str) -> None:
        """Set the status (``"running"``, ``"finished"``, ``"failed"``...).

        Raises NotFoundError if the experiment does not exist.
        """

    @abc.abstractmethod
    def set_experiment_config(self, experiment_id: int, config: Mapping[str, Any]) -> None:
        """Replace the experiment's ``config`` (a training job records its last checkpoint
        there: ``config["checkpoint"]["sha256"]`` is referenced, see ``referenced_artifacts``).

        Raises NotFoundError if the experiment does not exist.
        """

    @abc.abstractmethod
    def delete_experiment(self, name_or_id: str | int) -> int:
        """Delete an experiment and all its trials in one transaction; return the trial count.

        Model versions registered from it are kept (their lineage still names it) and its id
        is never reused. Raises NotFoundError if it does not exist.
        """

    # -- trials --------------------------------------------------------------------------

    @abc.abstractmethod
    def record_trials(self, experiment_id: int, trials: Sequence[TrialRecord]) -> None:
        """Insert or replace trials, all in one transaction.

        Idempotent upsert by ``(experiment_id, number)``: recording a number again replaces
        the stored trial. Within one call the last record of a number wins. Raises
        NotFoundError if the experiment does not exist and InvalidParameterError if a
        record's ``experiment_id`` differs from ``experiment_id``.
        """

    @abc.abstractmethod
    def get_trials(
        self,
        experiment_id: int,
        *,
        state: str | Sequence[str] | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[TrialRecord]:
        """Trials ordered by number, optionally only those in ``state`` (one or several).

        Raises NotFoundError if the experiment does not exist.
        """

    @abc.abstractmethod
    def count_trials(self, experiment_id: int, state: str | Sequence[str] | None = None) -> int:
        """How many trials (in ``state``) the experiment has; raises NotFoundError."""

    def count_trials_by_state(self, experiment_id: int) -> dict[str, int]:
        """How many trials the experiment has in each state (states with none left out);
        raises NotFoundError. This default reads every trial; backends count in the store."""
        counts: dict[str, int] = {}
        for trial in self.get_trials(experiment_id):
            counts[trial.state] = counts.get(trial.state, 0) + 1
        return counts

    @abc.abstractmethod
    def leaderboard(self, experiment_id: int, k: int = 10) -> list[TrialRecord]:
        """The ``k`` completed trials with the greatest value, best first.

        Trials whose value is None (or NaN) are left out; ties go to the lower number.
        Raises NotFoundError if the experiment does not exist.
        """

    # -- model versions ------------------------------------------------------------------

    @abc.abstractmethod
    def create_model_version(
        self,
        model: str,
        *,
        artifact_uri: str,
        sha256: str,
        format: str,
        metrics: Mapping[str, Any] | None = None,
        signature: Mapping[str, Any] | None = None,
        lineage: Mapping[str, Any] | None = None,
        trusted_types: Sequence[str] = (),
    ) -> ModelVersionRecord:
        """Register a new version of ``model`` (created on first use).

        The version is the next integer for that model, unique under concurrent writers.
        Raises InvalidParameterError if ``model`` is empty or over 256 characters, ``format``
        over 64, or ``sha256`` not 64 lowercase hex digits; RegistryError if a unique version
        could not be obtained.
        """

    @abc.abstractmethod
    def get_model_version(
        self, model: str, version: int | None = None, alias: str | None = None
    ) -> ModelVersionRecord:
        """A version by number, by alias, or the latest when both are None.

        Raises NotFoundError if the model, version or alias does not exist (or the model
        has no versions) and InvalidParameterError if both version and alias are given.
        """

    @abc.abstractmethod
    def list_model_versions(self, model: str) -> list[ModelVersionRecord]:
        """Every version of ``model``, oldest first; raises NotFoundError for no such model."""

    @abc.abstractmethod
    def list_models(self) -> list[str]:
        """Names of all registered models, sorted."""

    @abc.abstractmethod
    def search_model_versions(
        self,
        *,
        model: str | None = None,
        tag: tuple[str, str] | None = None,
        metric: str | None = None,
        min_value: float | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[ModelVersionRecord]:
        """Versions matching every filter given, one page at a time.

        ``tag`` is a ``(key, value)`` pair. ``metric`` keeps versions having that numeric
        metric (at least ``min_value`` when given) and orders them by it, greatest first;
        without ``metric`` the order is by model name, then version. Unknown names match
        nothing (no error).
        """

    @abc.abstractmethod
    def set_alias(self, model: str, alias: str, version: int) -> None:
        """Point ``model@alias`` at ``version``, moving it if it pointed elsewhere.

        Raises NotFoundError if the model or version does not exist and
        InvalidParameterError if ``alias`` is empty or over 256 characters.
        """

    @abc.abstractmethod
    def delete_alias(self, model: str, alias: str) -> None:
        """Remove ``model@alias``; raises NotFoundError if it does not exist."""

    @abc.abstractmethod
    def set_tag(self, model: str, version: int, key: str, value: str) -> None:
        """Set (or replace) a tag of a version.

        Raises NotFoundError for no such version and InvalidParameterError if ``key`` is
        empty or over 256 characters.
        """

    @abc.abstractmethod
    def delete_tag(self, model: str, version: int, key: str) -> None:
        """Remove a tag of a version; raises NotFoundError if version or tag is missing."""

    @abc.abstractmethod
    def delete_model_version(self, model: str, version: int) -> None:
        """Delete a version with its tags and the aliases pointing at it.

        The artifact is left to the garbage collector (see ``referenced_artifacts``).
        Raises NotFoundError if the version does not exist.
        """

    @abc.abstractmethod
    def referenced_artifacts(self) -> set[str]:
        """The sha256 of every artifact some version still references (for GC), and of the
        checkpoint an experiment's ``config["checkpoint"]`` records (an unfinished training
        job's, which ``dmlsearch resume`` continues from)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store must not be used afterwards."""

    # -- conveniences built on the primitives --------------------------------------------

    def experiment_summaries(self) -> dict[int, tuple[int, float | None]]:
        """Experiment id -> (number of trials, best value or None), for every experiment.

        Stores should override this with one query: listing experiments must not cost a
        round trip per experiment.
        """
        out: dict[int, tuple[int, float | None]] = {}
        for exp in self.list_experiments():
            top = self.leaderboard(exp.id, k=1)
            out[exp.id] = (self.count_trials(exp.id), top[0].value if top else None)
        return out

    def model_summaries(self) -> list[ModelSummary]:
        """One summary per registered model, sorted by name.

        Stores should override this with a few queries instead of one per model.
        """
        out = []
        for name in self.list_models():
            versions = self.list_model_versions(name)
            aliases = {a: v.version for v in versions for a in v.aliases}
            latest = versions[-1] if versions else None
            out.append(
                ModelSummary(
                    name=name,
                    latest_version=latest.version if latest else None,
                    n_versions=len(versions),
                    aliases=dict(sorted(aliases.items())),
                    created=versions[0].created if versions else 0.0,
                    updated=latest.created if latest else None,
                )
            )
        return out

    def get_or_create_experiment(
        self,
        name: str,
        *,
        config: Mapping[str, Any] | None = None,
        package_versions: Mapping[str, Any] | None = None,
        data_fingerprint: str | None = None,
        cluster: Mapping[str, Any] | None = None,
    ) -> ExperimentRecord:
        """The experiment called ``name``, created with these fields if it does not exist."""
        try:
            return self.get_experiment(name)
        except NotFoundError:
            pass
        try:
            return self.create_experiment(
                name,
                config=config,
                package_versions=package_versions,
                data_fingerprint=data_fingerprint,
                cluster=cluster,
            )
        except AlreadyExistsError:
            # Another process created it between our two calls.
            return self.get_experiment(name)

    def trials_dataframe(
        self, experiment_id: int, state: str | Sequence[str] | None = None
    ) -> pd.DataFrame:
        """Trials as a DataFrame, one row per trial ordered by number.

        Columns: number, state, value, ``mean_test_<metric>`` per metric, one
        ``param_<name>`` per parameter (missing where a trial lacks it), started, finished,
        duration, worker, retries, error, seed.
        """
        import pandas as pd

        trials = self.get_trials(experiment_id, state=state)
        rows = []
        for t in trials:
            row: dict[str, Any] = {"number": t.number, "state": t.state, "value": t.value}
            for name, folds in t.scores.items():
                row[f"mean_test_{name}"] = _fold_mean(folds) if folds else None
            for name, param in t.params.items():
                row[f"param_{name}"] = param
            row.update(
                started=t.started,
                finished=t.finished,
                duration=t.duration,
                worker=t.worker,
                retries=t.retries,
                error=t.error,
                seed=t.seed,
            )
            rows.append(row)
        columns = ["number", "state", "value"]
        if not rows:
            return pd.DataFrame(columns=[*columns, *_TAIL_COLUMNS])
        frame = pd.DataFrame.from_records(rows)
        # Stable column order: fixed head, metrics, params, fixed tail.
        metric_cols = sorted(c for c in frame.columns if c.startswith("mean_test_"))
        param_cols = sorted(c for c in frame.columns if c.startswith("param_"))
        return frame[[*columns, *metric_cols, *param_cols, *_TAIL_COLUMNS]]

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_TAIL_COLUMNS = ["started", "finished", "duration", "worker", "retries", "error", "seed"]


def now() -> float:
    """The current time as UTC POSIX seconds."""
    return time.time()
