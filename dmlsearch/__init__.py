"""dmlsearch: distributed machine learning on Dask.

Hyperparameter search with a scikit-learn-compatible front (:class:`SearchCV`), run
asynchronously on any Dask cluster (or an embedded ``LocalCluster``), with results in a
model registry (:class:`Registry`).

Names are imported lazily (PEP 562): ``import dmlsearch.registry`` in a worker process or
a CLI command must not pay for scikit-learn and Dask when it does not use them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .exceptions import (
    AllTrialsFailedError,
    DmlsearchError,
    InvalidParameterError,
    NoWorkersError,
    SearchSpaceError,
    TrialTimeoutError,
)

__version__ = "0.1.0"

_LAZY = {
    "SearchCV": ".search",
    "Categorical": ".space",
    "Float": ".space",
    "Int": ".space",
    "SearchSpace": ".space",
    "as_space": ".space",
    "STRATEGIES": ".strategies",
    "TrialOutcome": "._evaluate",
    "Registry": ".registry.registry",
    "optimize": "._optimize",
}

__all__ = [
    "STRATEGIES",
    "AllTrialsFailedError",
    "Categorical",
    "DmlsearchError",
    "Float",
    "Int",
    "InvalidParameterError",
    "NoWorkersError",
    "Registry",
    "SearchCV",
    "SearchSpace",
    "SearchSpaceError",
    "TrialOutcome",
    "TrialTimeoutError",
    "__version__",
    "as_space",
    "optimize",
]

if TYPE_CHECKING:
    from ._evaluate import TrialOutcome
    from ._optimize import optimize
    from .registry.registry import Registry
    from .search import SearchCV
    from .space import Categorical, Float, Int, SearchSpace, as_space
    from .strategies import STRATEGIES


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dmlsearch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
