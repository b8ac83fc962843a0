"""``Registry``: the user-facing model registry over a metadata store and an artifact store.

This module opens a registry (finding its artifact store) and is where its names are
imported from; the methods live in mixins beside it: ``_registry_core`` (shared state,
argument checks, lookups), ``_registry_runs`` (experiments, trials, Optuna export),
``_registry_models`` (model versions, aliases, ensembles' format) and ``_registry_upkeep``
(verification, garbage collection).
"""

from __future__ import annotations

import os
import re
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..exceptions import InvalidParameterError
from ._base import RegistryError, RegistryStore
from ._checks import check_bool, check_text
from ._registry_models import ENSEMBLE_FORMAT as ENSEMBLE_FORMAT
from ._registry_models import _RegistryModels
from ._registry_runs import _RegistryRuns
from ._registry_upkeep import _RegistryUpkeep
from .artifacts import (
    ArtifactLocationError,
    ArtifactStore,
    check_location,
    local_path,
    location_protocols,
)
from .sql import SQLStore, default_registry_url, sqlite_path

__all__ = ["ENSEMBLE_FORMAT", "Registry", "as_registry", "shown_url"]

_ARTIFACTS_FOLDER = "dmlsearch-artifacts"


def shown_url(url: str) -> str:
    """A database URL as every message and output shows it: any password as ``***``.

    What ``SQLStore.shown_url`` gives; a string that does not parse as a URL has whatever
    sits between ``user:`` and ``@`` hidden the same way.
    """
    import sqlalchemy as sa

    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", url)


def _is_url(location: str) -> bool:
    return bool(location_protocols(location))


def _normalize(location: str, base: Path | None = None) -> str:
    """A location as compared and used: URLs as given, local paths (file URLs decoded)
    absolute. A location the user gives (no ``base``) is checked first: ``s3:models``
    (no ``//``), ``::`` in a URL's path, a read-only protocol; one the registry records
    is read as it was written."""
    local = local_path(location)
    if local is None and base is None:
        check_location(location)
    if local is None and _is_url(location):
        return location.rstrip("/")
    path = Path(local or location).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    return os.path.normpath(path)


def _stored_form(location: str, folder: Path | None) -> str:
    """What the registry records: relative to a SQLite file's folder when inside it.

    A SQLite registry moved together with its artifacts (the default layout) still finds
    them; anything else is recorded absolute. A relative form that would read as a URL
    (a folder ``s3::x``) is recorded as ``./s3::x``.
    """
    if folder is not None and not _is_url(location):
        try:
            relative = Path(location).relative_to(folder).as_posix() or "."
        except ValueError:
            return location
        return f"./{relative}" if _is_url(relative) else relative
    return location


def _check_storage_options(value: object) -> dict[str, Any] | None:
    """``storage_options`` as given (a mapping with str keys), or None; never shows values."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidParameterError(
            "storage_options",
            f"expected a mapping of fsspec storage options (e.g. {{'endpoint_url': "
            f"'http://minio:9000'}}) or None, got a {type(value).__name__}",
        )
    keys = [k for k in value if not isinstance(k, str)]
    if keys:
        raise InvalidParameterError(
            "storage_options",
            f"expected option names (str) as keys, got a {type(keys[0]).__name__} key",
        )
    return dict(value)


def _new_sqlite_file(url: str) -> Path | None:
    """The SQLite database file ``url`` names, if it does not exist yet (this open would
    create it); else None."""
    import sqlalchemy as sa

    try:
        parsed = sa.make_url(url)
    except Exception:  # SQLStore reports a malformed URL
        return None
    path = sqlite_path(parsed)
    return None if path is None or path.exists() else path


class Registry(_RegistryRuns, _RegistryModels, _RegistryUpkeep):
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

    ``storage_options``: passed to the fsspec filesystem of the artifact store (an S3
    ``endpoint_url``, ``profile``, ``anon``, ...) and to the workers that write to it
    (multi-fidelity state copies). They may hold secrets: they are never recorded in the
    registry nor shown; a later open passes them again.
    """

    def __init__(
        self,
        url: str | None = None,
        artifacts: str | None = None,
        *,
        store: RegistryStore | None = None,
        create: bool = True,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        check_text("url", url, "a database URL", optional=True)
        check_text(
            "artifacts", artifacts, "an artifact store location (path or URL)", optional=True
        )
        check_bool("create", create)
        self._storage_options = _check_storage_options(storage_options) or {}
        new_file: Path | None = None
        if store is None:
            self.url = url or default_registry_url()
            new_file = _new_sqlite_file(self.url) if create else None
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
            self._differs: str | None = None
            location, hint = self._artifacts_location(artifacts, create)
            try:
                self.artifacts = ArtifactStore(
                    location, namespace=registry_id, **self._storage_options
                )
                self._check_shared(location)
                if self._differs is not None:
                    warnings.warn(self._differs, UserWarning, stacklevel=2)
            except RegistryError as exc:
                if location != self.recorded_artifacts:
                    raise
                raise self._recorded_error(exc) from None
        except BaseException:
            store.close()
            if new_file is not None:  # refused (its artifact store, say): leave no file behind
                for path in (new_file, *(Path(f"{new_file}{s}") for s in ("-wal", "-shm"))):
                    path.unlink(missing_ok=True)
            raise
        self.artifacts.hint = hint

    def _recorded_error(self, exc: RegistryError) -> RegistryError:
        """``exc`` about the recorded location (by a version that did not check it), with
        how to open the registry anyway."""
        return RegistryError(
            f"{exc} (the registry at {self._where} records it; open it with "
            "artifacts=LOCATION to use another)"
        )

    def _check_shared(self, location: str) -> None:
        """Refuse an in-process store (``memory://``) for a registry other processes open:
        its versions would name blobs no other process can read."""
        if "memory" not in location_protocols(location) or not isinstance(self.store, SQLStore):
            return
        url = self.store.url
        if url.get_backend_name() == "sqlite" and sqlite_path(url) is None:
            return  # an in-memory registry lives in this process too
        raise ArtifactLocationError(
            "artifacts",
            f"cannot use {location!r} as the artifact store of the registry at "
            f"{self._where}: a memory:// store exists in this process only, so other "
            "processes opening the registry would find none of its models; give a folder or "
            "a shared store (s3://bucket/models), or use memory:// with an in-memory "
            "registry (sqlite://)",
        )

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
            # Refuse a location that cannot work (or be written) before recording it.
            self._check_shared(location)
            ArtifactStore(location, **self._storage_options).check_writable()
            stored = self.store.setdefault_meta("artifacts", _stored_form(location, folder))
        try:
            recorded = _normalize(stored, folder)
        except RegistryError as exc:
            if explicit is None:
                raise self._recorded_error(exc) from None
            recorded = stored  # unusable: the explicit location wins, with the warning
        self.recorded_artifacts = recorded
        if explicit is not None and _normalize(explicit) != recorded:
            chosen = _normalize(explicit)
            self._check_shared(chosen)
            # Warned once the store opens (__init__): a location refused needs no warning.
            self._differs = (
                f"artifacts={explicit!r} differs from the artifact store that the registry at "
                f"{self._where} records ({recorded}); using {chosen} for this session only: "
                "the recorded location never changes, and a session opened without "
                f"artifacts= looks in {recorded}, so pass artifacts={chosen!r} on every open "
                "that should use this store"
            )
            return chosen, (
                f"this session uses the artifact store {chosen} (artifacts=), but the "
                f"registry records {recorded}"
            )
        return recorded, f"the registry records its artifact store at {recorded}; {moved}"

    @property
    def shown_url(self) -> str:
        """The registry's URL as messages show it: any password as ``***``."""
        return shown_url(self.url)

    def __repr__(self) -> str:
        return f"Registry({self.store!r}, artifacts={self.artifacts.url!r})"

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def as_registry(registry: Any) -> Registry:
    """A :class:`Registry` from what ``SearchCV(registry=...)`` accepts: one, or a URL."""
    if isinstance(registry, Registry):
        return registry
    if isinstance(registry, str):
        return Registry(registry)
    raise InvalidParameterError(
        "registry", f"expected a dmlsearch.Registry or a database URL, got {registry!r}"
    )
