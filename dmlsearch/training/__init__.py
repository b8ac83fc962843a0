"""Data-parallel PyTorch training on Dask workers (imports torch: never imported by ``dmlsearch``).

:class:`DataParallelTrainer` runs one rank per worker of a gang reserved all at once
(:mod:`dmlsearch.runner.gang`); see docs/training.md.
"""

from __future__ import annotations

from ._checkpoint import Checkpoint
from .trainer import SYNCS, DataParallelTrainer

__all__ = ["SYNCS", "Checkpoint", "DataParallelTrainer"]
