"""Ensembles as registry objects: a version that names its member versions and weights.

An ensemble version's blob is a small JSON document (format ``dmlsearch-ensemble``): the
member versions (model name and version number), a weight each, and the classes. Members
are registered once, as versions of their own; re-weighting or re-selecting writes a new
ensemble version that points at the same member versions, so nothing is trained again.
``Registry.load_model`` on an ensemble version loads each member (each blob's sha256
verified) and gives back a :class:`WeightedEnsemble`.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..exceptions import InvalidParameterError
from ..registry.formats import FormatError, Serialized
from ..registry.registry import ENSEMBLE_FORMAT
from .selection import WeightedPredictions

if TYPE_CHECKING:
    from ..registry import ModelVersionRecord, Registry

__all__ = ["WeightedEnsemble", "load_ensemble", "register_ensemble", "reweight_ensemble"]

#: The layout of an ensemble blob; a newer layout is refused by an older dmlsearch.
LAYOUT = 1


class WeightedEnsemble(WeightedPredictions, BaseEstimator):
    """Fitted members and their weights: predictions are the weighted mean.

    Classifiers average class probabilities (members without ``predict_proba`` vote with
    their ``decision_function`` or ``predict``, as in ensemble selection); regressors
    average predictions. What ``Registry.load_model`` gives back for an ensemble version;
    ``member_versions_`` names the registry versions it was built from.
    """

    def __init__(
        self,
        estimators: Sequence[Any] = (),
        weights: Sequence[float] = (),
        classes: Any = None,
    ) -> None:
        self.estimators = estimators
        self.weights = weights
        self.classes = classes

    def fit(self, X: Any = None, y: Any = None) -> WeightedEnsemble:
        """Check the members and weights; members are already fitted (nothing is trained)."""
        self.estimators_ = list(self.estimators)
        self.weights_ = check_weights(self.weights, len(self.estimators_))
        self._set_labels(None if self.classes is None else np.asarray(self.classes))
        return self

    def _is_classifier(self) -> bool:
        return self.classes is not None


def check_weights(weights: Any, n_members: int) -> np.ndarray:
    """``weights`` as floats summing to 1, or InvalidParameterError saying what is wrong."""
    if isinstance(weights, (str, bytes, Mapping)) or not isinstance(weights, Sequence | np.ndarray):
        raise InvalidParameterError("weights", f"expected a sequence of numbers, got {weights!r}")
    values = list(weights)
    if len(values) != n_members:
        raise InvalidParameterError(
            "weights", f"expected {n_members} weights (one per member), got {len(values)}"
        )
    for w in values:
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not 0 <= float(w) < np.inf:
            raise InvalidParameterError(
                "weights", f"every weight must be a finite number >= 0, got {w!r}"
            )
    array = np.asarray(values, dtype=np.float64)
    if not array.sum() > 0:
        raise InvalidParameterError("weights", "at least one weight must be > 0")
    return array / array.sum()


def _plain_classes(classes: Any) -> list[Any] | None:
    if classes is None:
        return None
    plain = np.asarray(classes).tolist()
    if not all(isinstance(c, (str, int, float, bool)) for c in plain):
        raise FormatError(
            f"an ensemble's classes must be strings or numbers to be registered, got {plain!r}"
        )
    return plain


def _dump(members: list[dict[str, Any]], classes: list[Any] | None) -> Serialized:
    doc = {"layout": LAYOUT, "members": members, "classes": classes}
    return Serialized(json.dumps(doc, sort_keys=True).encode(), ENSEMBLE_FORMAT)


def register_ensemble(
    registry: Registry,
    name: str,
    ensemble: Any,
    *,
    member_model: str | None = None,
    experiment: str | int | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> ModelVersionRecord:
    """Register a fitted ensemble as the next version of ``name``; returns its record.

    ``ensemble``: a fitted :class:`~dmlsearch.ensemble.EnsembleSelection` (its members
    are registered first, as versions of ``member_model``, default ``"<name>-members"``,
    each with its trial and experiment in its lineage), or a :class:`WeightedEnsemble`
    loaded from the registry (its member versions are reused, nothing is stored again).
    ``experiment``: the search's experiment (default: the one the selection read).
    """
    from ..registry import as_registry

    registry = as_registry(registry)
    check_is_fitted(ensemble, "estimators_")
    weights = check_weights(list(ensemble.weights_), len(ensemble.estimators_))
    classes = _plain_classes(getattr(ensemble, "classes_", None))
    trials: list[int | None] = list(getattr(ensemble, "members_", [None] * len(weights)))
    if experiment is None:
        experiment = _search_experiment(registry, ensemble)
    versions = getattr(ensemble, "member_versions_", None)
    if versions is None:
        model = member_model or f"{name}-members"
        versions = [
            (
                model,
                registry.register_model(
                    model, estimator, experiment=experiment, trial=trial
                ).version,
            )
            for estimator, trial in zip(ensemble.estimators_, trials, strict=True)
        ]
    members = [
        {"model": m, "version": int(v), "weight": float(w), "trial": t}
        for (m, v), w, t in zip(versions, weights, trials, strict=True)
    ]
    lineage: dict[str, Any] = {
        "kind": "ensemble",
        "members": [f"{m['model']}:{m['version']}" for m in members],
        "weights": [m["weight"] for m in members],
        "trials": trials,
    }
    return registry._register(
        name,
        lambda: _dump(members, classes),
        metrics=dict(metrics or {}),
        experiment=experiment,
        lineage=lineage,
    )


def _search_experiment(registry: Registry, ensemble: Any) -> str | None:
    """The experiment an ensemble selection read, when it is in ``registry``."""
    from ..registry import NotFoundError

    search = getattr(ensemble, "search", None)
    name = search if isinstance(search, str) else getattr(search, "experiment_name_", None)
    if not isinstance(name, str):
        return None
    try:
        return registry.experiment(name).name
    except NotFoundError:
        return None


def reweight_ensemble(
    registry: Registry,
    name: str,
    weights: Sequence[float],
    *,
    version: int | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> ModelVersionRecord:
    """A new version of ensemble ``name`` with the members of ``version`` (default: the
    latest) and new ``weights`` (one per member; 0 drops a member). Nothing is retrained."""
    from ..registry import as_registry

    registry = as_registry(registry)
    record = registry.model_version(name, version=version)
    doc = _read(record, registry.artifacts.get(record.sha256, what=f"of ensemble {name!r}"))
    members = doc["members"]
    new = check_weights(weights, len(members))
    kept = [dict(m, weight=float(w)) for m, w in zip(members, new, strict=True) if w > 0]
    lineage = {
        **{k: v for k, v in record.lineage.items() if k not in ("format_meta",)},
        "members": [f"{m['model']}:{m['version']}" for m in kept],
        "weights": [m["weight"] for m in kept],
        "trials": [m.get("trial") for m in kept],
        "reweighted_from": record.version,
    }
    return registry._register(
        name, lambda: _dump(kept, doc["classes"]), metrics=dict(metrics or {}), lineage=lineage
    )


def _read(record: ModelVersionRecord, data: bytes) -> dict[str, Any]:
    if record.format != ENSEMBLE_FORMAT:
        raise FormatError(
            f"model {record.model!r} version {record.version} is not an ensemble "
            f"(its format is {record.format!r})"
        )
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise FormatError(f"ensemble {record.model!r} v{record.version} is not JSON") from exc
    if not isinstance(doc, dict) or doc.get("layout") != LAYOUT:
        raise FormatError(
            f"ensemble {record.model!r} version {record.version} has layout "
            f"{doc.get('layout') if isinstance(doc, dict) else '?'}; this dmlsearch reads "
            f"layout {LAYOUT}: upgrade dmlsearch"
        )
    return doc


def load_ensemble(
    registry: Registry,
    record: ModelVersionRecord,
    data: bytes,
    *,
    allow_pickle: bool = False,
    module: Any = None,
) -> WeightedEnsemble:
    """The ensemble of ``record``: each member version loaded (and verified), then weighted."""
    doc = _read(record, data)
    members = doc["members"]
    estimators = [
        registry.load_model(
            m["model"], version=m["version"], allow_pickle=allow_pickle, module=module
        )
        for m in members
    ]
    ensemble = WeightedEnsemble(estimators, [m["weight"] for m in members], doc["classes"]).fit()
    ensemble.member_versions_ = [(m["model"], m["version"]) for m in members]
    ensemble.members_ = [m.get("trial") for m in members]
    ensemble.model_version_ = (record.model, record.version)
    return ensemble
