"""Data-parallel PyTorch training on Dask workers (imports torch: never imported by ``dmlsearch``).

:class:`DataParallelTrainer` runs one rank per worker of a gang reserved all at once
(:mod:`dmlsearch.runner.gang`); :class:`TorchClassifier` / :class:`TorchRegressor` are
scikit-learn estimators built on skorch, imported (with skorch) only when first used.
See docs/training.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._checkpoint import Checkpoint
from .trainer import SYNCS, DataParallelTrainer

if TYPE_CHECKING:
    from .estimators import TorchClassifier, TorchRegressor

__all__ = ["SYNCS", "Checkpoint", "DataParallelTrainer", "TorchClassifier", "TorchRegressor"]

#: Names imported on first use: the estimators need skorch, the trainer does not.
_LAZY = {"TorchClassifier": ".estimators", "TorchRegressor": ".estimators"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dmlsearch.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
