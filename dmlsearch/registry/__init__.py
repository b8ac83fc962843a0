"""Model registry: experiments, trials, model versions, aliases and lineage.

Metadata lives in a :class:`RegistryStore` (:class:`SQLStore` on SQLite or PostgreSQL);
artifacts live in a separate content-addressed store and are referenced by sha256.
"""

from __future__ import annotations

from ._base import (
    COMPLETE,
    FAILED,
    RUNNING,
    TIMEOUT,
    AlreadyExistsError,
    ExperimentDeletedError,
    ExperimentRecord,
    InUseError,
    ModelSummary,
    ModelVersionRecord,
    NotFoundError,
    RegistryError,
    RegistryOpenError,
    RegistryStore,
    RegistryUnavailableError,
    TrialRecord,
)
from .artifacts import (
    ArtifactIntegrityError,
    ArtifactLocationError,
    ArtifactStore,
    ArtifactWriteError,
)
from .formats import FormatError
from .registry import Registry, as_registry
from .sql import SCHEMA_VERSION, SQLStore, default_registry_url

__all__ = [
    "COMPLETE",
    "FAILED",
    "RUNNING",
    "SCHEMA_VERSION",
    "TIMEOUT",
    "AlreadyExistsError",
    "ArtifactIntegrityError",
    "ArtifactLocationError",
    "ArtifactStore",
    "ArtifactWriteError",
    "ExperimentDeletedError",
    "ExperimentRecord",
    "FormatError",
    "InUseError",
    "ModelSummary",
    "ModelVersionRecord",
    "NotFoundError",
    "Registry",
    "RegistryError",
    "RegistryOpenError",
    "RegistryStore",
    "RegistryUnavailableError",
    "SQLStore",
    "TrialRecord",
    "as_registry",
    "default_registry_url",
]
