"""Training jobs as the registry holds them, readable without torch.

A :class:`~dmlsearch.training.DataParallelTrainer` job is an experiment whose ``config``
says ``kind: train`` and whose registered version(s) name it in their lineage
(``experiment_id``). The CLI's ``show`` and the HTML report read jobs through this module:
importing :mod:`dmlsearch.training` would import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .registry import ExperimentRecord, ModelVersionRecord, Registry

__all__ = ["JOB_KIND", "is_training_job", "job_versions"]

#: ``ExperimentRecord.config["kind"]`` of a training job (a search's config has no kind).
JOB_KIND = "train"


def is_training_job(exp: ExperimentRecord) -> bool:
    """Whether a registry experiment records a training job (not a search)."""
    return isinstance(exp.config, dict) and exp.config.get("kind") == JOB_KIND


def job_versions(registry: Registry, exp: ExperimentRecord) -> list[ModelVersionRecord]:
    """The model versions registered from experiment ``exp``, by model name then version.

    Found by their lineage's ``experiment_id`` (ids are never reused, so a deleted job's
    versions never point at a new one of the same name).
    """
    return [
        v
        for name in registry.models()
        for v in registry.versions(name)
        if _same_id(v.lineage.get("experiment_id"), exp.id)
    ]


def _same_id(value: Any, experiment_id: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == experiment_id
