"""Helpers for testing dmlsearch and code built on it (importable on workers)."""

from __future__ import annotations

from .cluster import local_cluster
from .estimators import FailingClassifier, NoisyClassifier, SleepyClassifier

__all__ = ["FailingClassifier", "NoisyClassifier", "SleepyClassifier", "local_cluster"]
