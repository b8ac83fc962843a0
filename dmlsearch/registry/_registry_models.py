"""``Registry``'s model versions: registration, loading, aliases, deletion and search.

The blob goes to the artifact store (serialized by ``formats``, hashed there) and the
record to the metadata store; ensembles are stored as ``ENSEMBLE_FORMAT`` documents.
Separate from experiments and trials (``_registry_runs``): the two share only the core.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from ..exceptions import InvalidParameterError
from ._base import InUseError, ModelVersionRecord, NotFoundError, RegistryError
from ._checks import (
    MAX_NAME,
    check_alias_name,
    check_bool,
    check_count,
    check_mapping,
    check_model_name,
    check_text,
)
from ._registry_core import (
    _check_experiment_key,
    _check_model_name,
    _check_version,
    _RegistryCore,
)
from .formats import Serialized, dump_model, load_model

if TYPE_CHECKING:
    import pandas as pd

    from .registry import Registry

#: The format of an ensemble version: JSON naming member versions and weights.
ENSEMBLE_FORMAT = "dmlsearch-ensemble"

logger = logging.getLogger("dmlsearch.registry")


class _RegistryModels(_RegistryCore):
    """The model version methods of ``Registry``."""

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
        # The store's limit too, before serialize() writes a blob for a name it would refuse.
        check_model_name("name", name, max_length=MAX_NAME)
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
        try:
            owned = self.artifacts.owns(digest)
        except RegistryError as exc:
            # The version is committed and its blob was written a moment ago: a store
            # that cannot be read now is no reason to call the registration failed.
            logger.warning("could not check %s v%s's blob after registering it: %s",
                           name, record.version, exc)  # fmt: skip
            owned = True
        if not owned:
            # A gc in another process took the blob between the write and the commit
            # (past its grace period, or with none): write it again.
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

            registry = cast("Registry", self)  # this mixin is only ever part of a Registry
            return load_ensemble(registry, record, data, allow_pickle=allow_pickle, module=module)
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
        check_alias_name("alias", alias)
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

    def set_tag(self, name: str, version: int, key: str, value: Any) -> None:
        """Set (or replace) tag ``key`` of a version to ``str(value)``, as MLflow's
        ``set_model_version_tag``; :meth:`search_models` finds versions by tag."""
        self._on_version(name, version, "set_tag", self.store.set_tag, key, str(value))

    def delete_tag(self, name: str, version: int, key: str) -> None:
        """Remove tag ``key`` of a version; raises NotFoundError if it has none."""
        self._on_version(name, version, "delete_tag", self.store.delete_tag, key)

    def _on_version(
        self, name: str, version: int, what: str, call: Callable[..., None], *args: Any
    ) -> None:
        _check_model_name("name", name)
        _check_version("version", version)
        if version is None:
            raise InvalidParameterError("version", f"{what} needs the version")
        try:
            call(name, version, *args)
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
