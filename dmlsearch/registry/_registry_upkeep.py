"""``Registry``'s upkeep: verifying artifacts against their sha256, and garbage collection.

Separate from registration and loading (``_registry_models``): these walk every version
and the whole artifact store rather than serve one model.
"""

from __future__ import annotations

import math

from ..exceptions import InvalidParameterError
from ._checks import check_bool
from ._registry_core import _RegistryCore


class _RegistryUpkeep(_RegistryCore):
    """The verify and gc methods of ``Registry``."""

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
        process keeps its blob; a version that commits while gc runs keeps it whatever the
        grace period (the store is listed before the references are read; see
        :meth:`ArtifactStore.collect`). Temporary files of crashed writes past the grace period go
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

        # A callable: the store is listed first, then the references read (twice).
        removed = self.artifacts.collect(
            self.store.referenced_artifacts, grace_seconds=grace_seconds, dry_run=dry_run
        )
        return removed + collect_states(self.artifacts, grace_seconds, dry_run)
