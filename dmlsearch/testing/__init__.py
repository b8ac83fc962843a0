"""Helpers for testing dmlsearch and code built on it (importable on workers)."""

from __future__ import annotations

from .cluster import local_cluster
from .estimators import CrashingClassifier, FailingClassifier, NoisyClassifier, SleepyClassifier
from .units import PowerKind, WaveSource

__all__ = [
    "CrashingClassifier",
    "FailingClassifier",
    "NoisyClassifier",
    "PowerKind",
    "SleepyClassifier",
    "WaveSource",
    "local_cluster",
]
