"""Helpers for testing dmlsearch and code built on it (importable on workers)."""

from __future__ import annotations

from .cluster import local_cluster
from .estimators import CrashingClassifier, FailingClassifier, NoisyClassifier, SleepyClassifier

__all__ = [
    "CrashingClassifier",
    "FailingClassifier",
    "NoisyClassifier",
    "SleepyClassifier",
    "local_cluster",
]
