"""``Registry``: the user-facing model registry over a metadata store and an artifact store."""

from __future__ import annotations

import difflib
import math
import os
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidParameterError
from ._base import ExperimentRecord, InUseError, ModelVersionRecord, NotFoundError, RegistryStore
from ._checks import (
    INT32_MAX,
    check_bool,
    check_count,
    check_mapping,
    check_states,
    check_text,
)
from .artifacts import ArtifactStore
from .formats import Serialized, dump_model, load_model
from .sql import SQLStore, default_registry_url, sqlite_path

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ENSEMBLE_FORMAT", "Registry", "as_registry"]

#: The format of an ensemble version: JSON naming member versions and weights.
ENSEMBLE_FORMAT = "dmlsearch-ensemble"

_ARTIFACTS_FOLDER = "dmlsearch-artifacts"


def _is_url(location: str) -> bool:
    return "://" in location


def _normalize(location: str, base: Path | None = None) -> str:
    """A location as compared and used: URLs as given, local paths absolute."""
    if _is_url(location):
        return location.rstrip("/")
    path = Path(location).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    return os.path.normpath(path)


def _stored_form(location: str, folder: Path | None) -> str:
    """What the registry records: relative to a SQLite file's folder when inside it.

    A SQLite registry moved together with its artifacts (the default layout) still finds
    them; anything else is recorded absolute.
    """
    if folder is not None and not _is_url(location):
        try:
            return Path(location).relative_to(folder).as_posix() or "."
        except ValueError:
            pass
    return location


def _suggestion(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_model_name(param: str, value: object) -> None:
    hint = ""
    if isinstance(value, ModelVersionRecord):
        hint = (
            "; for a ModelVersionRecord pass its name and version: "
            "load_model(record.model, version=record.version)"
        )
    check_text(param, value, "a model name", hint=hint)


def _check_version(param: str, value: object) -> None:
    check_count(param, value, "a version number", minimum=1, maximum=INT32_MAX, optional=True)


def _check_experiment_key(param: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        hint = ""
        if isinstance(value, ExperimentRecord):
            hint = "; for an ExperimentRecord pass record.name or record.id"
        raise InvalidParameterError(
            param,
            f"expected an experiment name (str) or id (int), got {type(value).__name__} "
            f"{value!r}{hint}",
        )
    if isinstance(value, str):
        check_text(param, value, "an experiment name")
    else:
        check_count(param, value, "an experiment id", minimum=1, maximum=INT32_MAX)


class Registry:
    """Experiments, trials and versioned models.

    Metadata lives in SQL (``url``: SQLite by default, a ``postgresql+psycopg://`` URL at
    scale, or ``DMLSEARCH_REGISTRY``); model files live in a content-addressed artifact
    store, verified by sha256 on every load.

    The artifact store's location is recorded in the registry when it is created: the
    ``artifacts`` argument, else ``DMLSEARCH_ARTIFACTS``, else a folder
    ``dmlsearch-artifacts`` beside a SQLite file (recorded relative to it, so the pair can
    be moved together) or in the working directory. Every later open uses the recorded
    location, from any folder or host. An ``artifacts`` argument that differs from it wins
    for this session only, with a warning (the same store mounted elsewhere);
    ``DMLSEARCH_ARTIFACTS`` never overrides a recorded location. Blobs go to a folder named
    by the registry's id inside the store, so registries sharing a store never collect each
    other's blobs.

    With ``create=False`` nothing is created: a database without a registry (or a SQLite
    file that does not exist) raises RegistryError naming the URL. Reading commands use it.
    """

    def __init__(
        self,
        url: str | None = None,
        artifacts: str | None = None,
        *,
        store: RegistryStore | None = None,
        create: bool = True,
    ) -> None:
        check_text("url", url, "a database URL", optional=True)
        check_text(
            "artifacts", artifacts, "an artifact store location (path or URL)", optional=True
        )
        check_bool("create", create)
        if store is None:
            self.url = url or default_registry_url()
            store = SQLStore(self.url, create=create)
        elif url is None and isinstance(store, SQLStore):
            self.url = store.url.render_as_string(hide_password=False)
        else:
            self.url = url or default_registry_url()
        self.store: RegistryStore = store
        try:
            self._where = store.shown_url if isinstance(store, SQLStore) else repr(store)
            registry_id = store.get_meta("registry_id")
            if registry_id is None and create:
                registry_id = store.setdefault_meta("registry_id", uuid.uuid4().hex)
            #: The registry's id: the folder of its blobs in the artifact store.
            self.registry_id = registry_id
            location, hint = self._artifacts_location(artifacts, create)
        except BaseException:
            store.close()
            raise
        self.artifacts = ArtifactStore(location, namespace=registry_id)
        self.artifacts.hint = hint

    def _sqlite_folder(self) -> Path | None:
        """The folder of a SQLite database file (None for other stores)."""
        if not isinstance(self.store, SQLStore):
            return None
        path = sqlite_path(self.store.url)
        return None if path is None else path.parent

    def _artifacts_location(self, explicit: str | None, create: bool) -> tuple[str, str]:
        """The store to use and the hint for "missing" messages; records it on creation."""
        folder = self._sqlite_folder()
        stored = self.store.get_meta("artifacts")
        moved = "if the artifacts moved, open the registry with artifacts=NEW_LOCATION"
        if stored is None:
            # A new registry, or one written before locations were recorded.
            location = _normalize(
                explicit
                or os.environ.get("DMLSEARCH_ARTIFACTS")
                or str((folder or Path.cwd()) / _ARTIFACTS_FOLDER)
            )
            if not create:
                #: Where the registry records its artifact store (None: not recorded).
                self.recorded_artifacts: str | None = None
                return location, (
                    f"this registry does not record its artifact store (it predates that); "
                    f"this session uses {location}; {moved}"
                )
            stored = self.store.setdefault_meta("artifacts", _stored_form(location, folder))
        recorded = _normalize(stored, folder)
        self.recorded_artifacts = recorded
        if explicit is not None and _normalize(explicit) != recorded:
            chosen = _normalize(explicit)
            warnings.warn(
                f"artifacts={explicit!r} differs from the artifact store that the registry at "
                f"{self._where} records ({recorded}); using {chosen} for this session only",
                UserWarning,
                stacklevel=3,
            )
            return chosen, (
                f"this session uses the artifact store {chosen} (artifacts=), but the "
                f"registry records {recorded}"
            )
        return recorded, f"the registry records its artifact store at {recorded}; {moved}"

    def __repr__(self) -> str:
        return f"Registry({self.store!r}, artifacts={self.artifacts.url!r})"

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lookups with "did you mean" --------------------------------------------------------
    def _no_experiment(self, key: str | int) -> NotFoundError:
        names = [e.name for e in self.store.list_experiments()]
        hint = _suggestion(key, names) if isinstance(key, str) else ""
        return NotFoundError(f"no experiment {key!r} in {self._where}{hint}")

    def _model_error(self, name: str, exc: NotFoundError) -> NotFoundError:
        """``exc``, or one suggesting a model name when ``name`` is not a model at all."""
        names = self.store.list_models()
        if name in names:
            return exc
        hint = _suggestion(name, names) or (" (no models yet)" if not names else "")
        return NotFoundError(f"no model {name!r} in {self._where}{hint}")

    # -- experiments and trials -------------------------------------------------------------
    def experiment(self, name_or_id: str | int) -> ExperimentRecord:
        """The experiment with this name or id; NotFoundError suggests a close name."""
        _check_experiment_key("name_or_id", name_or_id)
        try:
            return self.store.get_experiment(name_or_id)
        except NotFoundError:
            raise self._no_experiment(name_or_id) from None

    def delete_experiment(self, name_or_id: str | int) -> dict[str, Any]:
        """Delete an experiment and its trials, then the blobs nothing references any more.

        Model versions registered from the experiment are kept (they are models users load;
        their lineage still names it), so are their artifacts and every blob written in the
        last hour (see :meth:`gc`). The trials' out-of-fold predictions (``keep_oof``) go
        with the experiment. Returns ``{"experiment": name, "id": id, "trials": n,
        "artifacts": [deleted paths]}``. Raises NotFoundError (suggesting a close name) if
        there is no such experiment.
        """
        from .._oof import delete_folder

        exp = self.experiment(name_or_id)
        try:
            n_trials = self.store.delete_experiment(exp.id)
        except NotFoundError:  # deleted by another process meanwhile
            raise self._no_experiment(name_or_id) from None
        removed = delete_folder(self, exp) + self.gc()
        return {"experiment": exp.name, "id": exp.id, "trials": n_trials, "artifacts": removed}

    def experiments(self) -> pd.DataFrame:
        """One row per experiment: id, name, kind (``search``, ``optimize`` or ``train``),
        status, created, number of trials, best value."""
        import pandas as pd

        summaries = self.store.experiment_summaries()
        rows = []
        for exp in self.store.list_experiments():
            n_trials, best = summaries.get(exp.id, (0, None))
            rows.append(
                {
                    "id": exp.id,
                    "name": exp.name,
                    # A search's config has no kind; optimize and training jobs say theirs.
                    "kind": str((exp.config or {}).get("kind", "search")),
                    "status": exp.status,
                    "created": pd.Timestamp(exp.created, unit="s", tz="UTC"),
                    "trials": n_trials,
                    "best_value": best,
                }
            )
        columns = ["id", "name", "kind", "status", "created", "trials", "best_value"]
        return pd.DataFrame(rows, columns=columns)

    def trials(
        self, experiment: str | int, state: str | Sequence[str] | None = None
    ) -> pd.DataFrame:
        """The trials of an experiment as a DataFrame (``param_<name>`` columns)."""
        check_states("state", state)
        exp = self.experiment(experiment)
        return self.store.trials_dataframe(exp.id, state=state)

    def leaderboard(self, experiment: str | int, k: int = 10) -> pd.DataFrame:
        """The ``k`` best completed trials, best first."""
        import pandas as pd

        check_count("k", k, "a number of trials")
        exp = self.experiment(experiment)
        rows = [
            {"number": t.number, "value": t.value, **{f"param_{n}": v for n, v in t.params.items()}}
            for t in self.store.leaderboard(exp.id, k=k)
        ]
        return pd.DataFrame(rows)

    def to_optuna(self, experiment: str | int, storage: Any = None) -> Any:
        """Copy an experiment's trials into an Optuna study (maximised objective).

        ``optuna.visualization`` and optuna-dashboard then work on our trials. ``storage``
        is any Optuna storage (URL or object); default in memory. Distributions are
        inferred from the recorded values: numbers span their observed range (log scale
        when positive over more than two decades), anything else is categorical.
        """
        import optuna

        exp = self.experiment(experiment)
        trials = self.store.get_trials(exp.id)
        distributions = _infer_distributions([t.params for t in trials])
        study = optuna.create_study(
            study_name=exp.name, storage=storage, direction="maximize", load_if_exists=False
        )
        study.set_user_attr("dmlsearch_experiment_id", exp.id)
        frozen = []
        for t in trials:
            params = {k: _optuna_value(v) for k, v in t.params.items() if k in distributions}
            complete = t.state == "complete" and t.value is not None
            frozen.append(
                optuna.trial.create_trial(
                    params=params,
                    distributions={k: distributions[k] for k in params},
                    value=t.value if complete else None,
                    state=optuna.trial.TrialState.COMPLETE
                    if complete
                    else optuna.trial.TrialState.FAIL,
                    user_attrs={"dmlsearch_number": t.number, "worker": t.worker or ""},
                )
            )
        study.add_trials(frozen)
        return study

    # -- models -----------------------------------------------------------------------------
    def register_model(
        self,
        name: str,
        model: Any,
        *,
        metrics: Mapping[str, Any] | None = None,
        experiment: str | int | None = None,
        trial: int | None = None,
        data_fingerprint: str | None = None,
        signature: Mapping[str, Any] | None = None,
        lineage: Mapping[str, Any] | None = None,
        allow_pickle: bool = False,
    ) -> ModelVersionRecord:
        """Save ``model`` as the next version of ``name``.

        The blob is written first, then the metadata in one transaction: a crash in
        between leaves an unreferenced blob (removed by :meth:`gc` after its grace period),
        never a half version. Raises RegistryUnavailableError if the database is out of
        reach (nothing was registered; retrying is safe).
        """
        check_bool("allow_pickle", allow_pickle)
        return self._register(
            name,
            lambda: dump_model(model, allow_pickle=allow_pickle),
            metrics=metrics,
            experiment=experiment,
            trial=trial,
            data_fingerprint=data_fingerprint,
            signature=signature,
            lineage=lineage,
        )

    def _register(
        self,
        name: str,
        serialize: Callable[[], Serialized],
        *,
        metrics: Mapping[str, Any] | None = None,
        experiment: str | int | None = None,
        trial: int | None = None,
        data_fingerprint: str | None = None,
        signature: Mapping[str, Any] | None = None,
        lineage: Mapping[str, Any] | None = None,
    ) -> ModelVersionRecord:
        """Check the arguments, then store ``serialize()`` as the next version of ``name``
        (models through :func:`dump_model`, ensembles as their own format)."""
        _check_model_name("name", name)
        check_count("trial", trial, "a trial number", optional=True)
        if experiment is not None:
            _check_experiment_key("experiment", experiment)
        for param, value in (("metrics", metrics), ("signature", signature), ("lineage", lineage)):
            check_mapping(param, value, param)
        check_text("data_fingerprint", data_fingerprint, "a data fingerprint", optional=True)
        serialized = serialize()
        links: dict[str, Any] = dict(lineage or {})
        if experiment is not None:
            exp = self.experiment(experiment)
            links.setdefault("experiment_id", exp.id)
            links.setdefault("experiment", exp.name)
            if data_fingerprint is None:
                data_fingerprint = exp.data_fingerprint
        if trial is not None:
            links.setdefault("trial", int(trial))
        if data_fingerprint is not None:
            links.setdefault("data_fingerprint", data_fingerprint)
        links.setdefault("format_meta", serialized.meta)
        uri, digest = self.artifacts.put(serialized.data)
        record = self.store.create_model_version(
            name,
            artifact_uri=uri,
            sha256=digest,
            format=serialized.format,
            metrics=dict(metrics or {}),
            signature=dict(signature) if signature is not None else None,
            lineage=links,
            trusted_types=serialized.trusted_types,
        )
        if not self.artifacts.owns(digest):
            # A gc in another process took the blob between the write and the commit
            # (possible only past the grace period): write it again.
            self.artifacts.put(serialized.data)
        return record

    def model_version(
        self, name: str, version: int | None = None, alias: str | None = None
    ) -> ModelVersionRecord:
        """The record of a version (latest when neither ``version`` nor ``alias`` is given).

        ``"name@alias"`` works too. Raises NotFoundError (suggesting a close model name for
        an unknown model) and InvalidParameterError for arguments of the wrong type.
        """
        _check_model_name("name", name)
        _check_version("version", version)
        check_text("alias", alias, "an alias name", optional=True)
        if "@" in name and alias is None and version is None:
            name, alias = name.split("@", 1)
        try:
            return self.store.get_model_version(name, version=version, alias=alias)
        except NotFoundError as exc:
            raise self._model_error(name, exc) from None

    def load_model(
        self,
        name: str,
        version: int | None = None,
        alias: str | None = None,
        *,
        allow_pickle: bool = False,
        module: Any = None,
    ) -> Any:
        """Load a version; ``"name@alias"`` works too. The artifact's sha256 is verified.

        Raises ArtifactIntegrityError naming the blob's full path (and where the registry
        keeps its artifacts) if it is missing or altered.
        """
        record = self.model_version(name, version=version, alias=alias)
        data = self.artifacts.get(
            record.sha256, what=f"of model {record.model!r} version {record.version}"
        )
        if record.format == ENSEMBLE_FORMAT:
            # An ensemble's blob names its member versions: load each, then assemble.
            from ..ensemble.registered import load_ensemble

            return load_ensemble(self, record, data, allow_pickle=allow_pickle, module=module)
        serialized = Serialized(
            data,
            record.format,
            trusted_types=list(record.trusted_types),
            meta=dict(record.lineage.get("format_meta", {})),
        )
        return load_model(serialized, allow_pickle=allow_pickle, module=module)

    def set_alias(self, name: str, alias: str, version: int) -> None:
        """Point ``name@alias`` at ``version`` (moving it if it pointed elsewhere)."""
        _check_model_name("name", name)
        check_text("alias", alias, "an alias name")
        _check_version("version", version)
        if version is None:
            raise InvalidParameterError("version", "set_alias needs the version to point at")
        try:
            self.store.set_alias(name, alias, version)
        except NotFoundError as exc:
            raise self._model_error(name, exc) from None

    def delete_alias(self, name: str, alias: str) -> None:
        """Remove ``name@alias`` (the version stays); raises NotFoundError if there is none."""
        _check_model_name("name", name)
        check_text("alias", alias, "an alias name")
        try:
            self.store.delete_alias(name, alias)
        except NotFoundError as exc:
            raise self._model_error(name, exc) from None

    def delete_version(self, name: str, version: int, *, force: bool = False) -> None:
        """Delete a version with its tags and aliases; its blob goes at the next :meth:`gc`.

        A version that is a member of a registered ensemble is refused with
        :class:`InUseError` naming the ensembles (they could no longer load), unless
        ``force=True``.
        """
        _check_model_name("name", name)
        _check_version("version", version)
        check_bool("force", force)
        if version is None:
            raise InvalidParameterError("version", "delete_version needs the version to delete")
        users = [] if force else self.ensembles_using(name, version)
        if users:
            shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
            raise InUseError(
                f"{name} version {version} is a member of the ensemble version(s) {shown}, "
                "which would no longer load; delete those first, or pass force=True"
            )
        try:
            self.store.delete_model_version(name, version)
        except NotFoundError as exc:
            raise self._model_error(name, exc) from None

    def ensembles_using(self, name: str, version: int) -> list[str]:
        """``"ensemble:version"`` of each registered ensemble that has ``name:version`` as a member."""
        _check_model_name("name", name)
        _check_version("version", version)
        member = f"{name}:{version}"
        return [
            f"{model}:{record.version}"
            for model in self.store.list_models()
            for record in self.store.list_model_versions(model)
            if record.lineage.get("kind") == "ensemble"
            and member in (record.lineage.get("members") or ())
        ]

    def models(self) -> list[str]:
        """Names of the registered models, sorted (see :meth:`model_summaries` for more)."""
        return self.store.list_models()

    def model_summaries(self) -> pd.DataFrame:
        """One row per model: name, latest_version, versions, aliases, created, updated.

        ``versions`` counts the versions, ``aliases`` maps each alias to its version,
        ``created`` is when the model was first registered and ``updated`` when its latest
        version was (UTC timestamps).
        """
        import pandas as pd

        def stamp(value: float | None) -> Any:
            return None if value is None else pd.Timestamp(value, unit="s", tz="UTC")

        rows = [
            {
                "name": m.name,
                "latest_version": m.latest_version,
                "versions": m.n_versions,
                "aliases": dict(m.aliases),
                "created": stamp(m.created),
                "updated": stamp(m.updated),
            }
            for m in self.store.model_summaries()
        ]
        columns = ["name", "latest_version", "versions", "aliases", "created", "updated"]
        return pd.DataFrame(rows, columns=columns)

    def versions(self, name: str) -> list[ModelVersionRecord]:
        """Every version of ``name``, oldest first."""
        _check_model_name("name", name)
        try:
            return self.store.list_model_versions(name)
        except NotFoundError as exc:
            raise self._model_error(name, exc) from None

    def search_models(
        self,
        *,
        name: str | None = None,
        tag: tuple[str, str] | None = None,
        metric: str | None = None,
        min_value: float | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[ModelVersionRecord]:
        """Versions matching every filter, best ``metric`` first when one is given."""
        if name is not None:
            _check_model_name("name", name)
        check_text("metric", metric, "a metric name", optional=True)
        check_count("offset", offset, "an offset")
        check_count("limit", limit, "a page size")
        return self.store.search_model_versions(
            model=name, tag=tag, metric=metric, min_value=min_value, offset=offset, limit=limit
        )

    def verify(self) -> dict[tuple[str, int], bool]:
        """Whether every version's artifact exists and matches its sha256."""
        errors = self.verify_errors()
        return {key: key not in errors for key in self._version_keys()}

    def _version_keys(self) -> list[tuple[str, int]]:
        return [
            (model, record.version)
            for model in self.store.list_models()
            for record in self.store.list_model_versions(model)
        ]

    def verify_errors(self) -> dict[tuple[str, int], str]:
        """``(model, version) -> message`` for each version whose artifact is missing or altered.

        Each message names the blob's full path and where the registry keeps its artifacts.
        Empty when everything verifies.
        """
        out = {}
        for model in self.store.list_models():
            for record in self.store.list_model_versions(model):
                problem = self.artifacts.problem(
                    record.sha256, what=f"of model {model!r} version {record.version}"
                )
                if problem is not None:
                    out[(model, record.version)] = problem
        return out

    def checkpoint_errors(self) -> dict[str, str]:
        """``experiment name -> message`` for each unfinished training job whose recorded
        last checkpoint (what ``dmlsearch resume`` would continue from) is missing or altered.
        Empty when every recorded checkpoint verifies."""
        out = {}
        for experiment in self.store.list_experiments():
            checkpoint = experiment.config.get("checkpoint")
            if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("sha256"), str):
                continue
            problem = self.artifacts.problem(
                checkpoint["sha256"],
                what=f"of training job {experiment.name!r}'s epoch-{checkpoint.get('epoch')} "
                "checkpoint",
            )
            if problem is not None:
                out[experiment.name] = problem
        return out

    def gc(self, *, dry_run: bool = False, grace_seconds: float = 3600.0) -> list[str]:
        """Delete this registry's blobs that no version references; return their paths.

        Only blobs under this registry's own folder of the artifact store are considered
        (never another registry's, nor blobs from before namespaces), and only those
        written more than ``grace_seconds`` ago, so a registration in flight in another
        process keeps its blob. Temporary files of crashed writes past the grace period go
        too, and so do the copies of trials' states that a crashed multi-fidelity search
        left (``SearchCV(state_store=...)``; a finished search deletes its own). With
        ``dry_run`` nothing is deleted and the paths that would be are returned.
        """
        check_bool("dry_run", dry_run)
        if (
            isinstance(grace_seconds, bool)
            or not isinstance(grace_seconds, (int, float))
            or not math.isfinite(grace_seconds)
            or grace_seconds < 0
        ):
            raise InvalidParameterError(
                "grace_seconds", f"must be a number of seconds >= 0, got {grace_seconds!r}"
            )
        if self.artifacts.namespace is None:
            return []  # an old registry opened without upgrading: nothing is provably ours
        from .._rung_store import collect_states

        referenced = self.store.referenced_artifacts()
        removed = self.artifacts.collect(referenced, grace_seconds=grace_seconds, dry_run=dry_run)
        return removed + collect_states(self.artifacts, grace_seconds, dry_run)


def _optuna_value(value: Any) -> Any:
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value
    return repr(value)


def _infer_distributions(all_params: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    import math

    from optuna.distributions import CategoricalDistribution, FloatDistribution

    values: dict[str, list[Any]] = {}
    for params in all_params:
        for key, value in params.items():
            values.setdefault(key, []).append(_optuna_value(value))
    out: dict[str, Any] = {}
    for key, vals in values.items():
        numeric = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numeric) == len(vals) and all(math.isfinite(v) for v in numeric):
            low, high = float(min(numeric)), float(max(numeric))
            log = low > 0 and high / low > 100
            out[key] = FloatDistribution(low, high if high > low else low + 1e-12, log=log)
        else:
            choices: list[Any] = []
            for v in vals:
                if v not in choices:
                    choices.append(v)
            out[key] = CategoricalDistribution(choices)
    return out


def as_registry(registry: Any) -> Registry:
    """A :class:`Registry` from what ``SearchCV(registry=...)`` accepts: one, or a URL."""
    if isinstance(registry, Registry):
        return registry
    if isinstance(registry, str):
        return Registry(registry)
    raise InvalidParameterError(
        "registry", f"expected a dmlsearch.Registry or a database URL, got {registry!r}"
    )
