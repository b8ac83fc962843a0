"""Ensembles whose members are fitted on a Dask cluster, through the runner's one loop.

* :class:`BaggingClassifier`, :class:`BaggingRegressor`: each member is a unit of work;
  the data is scattered once and each member's rows and features are drawn on its worker
  from its own seed, so results do not depend on the cluster or the batching.
* :class:`StackingClassifier`, :class:`StackingRegressor`: each (base estimator x fold)
  fit, and each base estimator's refit on all rows, is a unit; one fold assignment.
* :class:`EnsembleSelection`: Caruana's greedy selection over the trials of a search
  fitted with ``keep_oof=True``; the chosen members are refitted as units.

See docs/ensembles.md. Worker processes import only :mod:`dmlsearch.ensemble._members`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._members import MemberError, MemberFitError, MemberLostError

__all__ = [
    "BaggingClassifier",
    "BaggingRegressor",
    "EnsembleSelection",
    "MemberError",
    "MemberFitError",
    "MemberLostError",
    "StackingClassifier",
    "StackingRegressor",
    "WeightedEnsemble",
    "register_ensemble",
    "release_oof",
    "reweight_ensemble",
]

_LAZY = {
    "BaggingClassifier": ".bagging",
    "BaggingRegressor": ".bagging",
    "EnsembleSelection": ".selection",
    "StackingClassifier": ".stacking",
    "StackingRegressor": ".stacking",
    "release_oof": "._selection_source",
    "WeightedEnsemble": ".registered",
    "register_ensemble": ".registered",
    "reweight_ensemble": ".registered",
}

if TYPE_CHECKING:
    from ._selection_source import release_oof
    from .bagging import BaggingClassifier, BaggingRegressor
    from .registered import WeightedEnsemble, register_ensemble, reweight_ensemble
    from .selection import EnsembleSelection
    from .stacking import StackingClassifier, StackingRegressor


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dmlsearch.ensemble' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
