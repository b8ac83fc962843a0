"""dmlsearch: distributed machine learning on Dask.

Hyperparameter search with a scikit-learn-compatible front (:class:`SearchCV`), run
asynchronously on any Dask cluster (or an embedded ``LocalCluster``).
"""

from __future__ import annotations

from ._evaluate import TrialOutcome
from .exceptions import (
    AllTrialsFailedError,
    DmlsearchError,
    InvalidParameterError,
    SearchSpaceError,
    TrialTimeoutError,
)
from .search import SearchCV
from .space import Categorical, Float, Int, SearchSpace, as_space
from .strategies import STRATEGIES

__version__ = "0.1.0"

__all__ = [
    "STRATEGIES",
    "AllTrialsFailedError",
    "Categorical",
    "DmlsearchError",
    "Float",
    "Int",
    "InvalidParameterError",
    "SearchCV",
    "SearchSpace",
    "SearchSpaceError",
    "TrialOutcome",
    "TrialTimeoutError",
    "__version__",
    "as_space",
]
