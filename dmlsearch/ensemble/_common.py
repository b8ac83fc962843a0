"""Parameter checks and helpers shared by the ensemble estimators (driver side)."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .._validation import final_step
from ..exceptions import InvalidParameterError

__all__ = [
    "ClientParam",
    "check_bool",
    "check_estimator",
    "check_takes_sample_weight",
    "entropy_of",
    "nan_allowed",
    "sample_weight_of",
    "weight_key",
]


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(name, f"expected True or False, got {value!r}")
    return bool(value)


def check_estimator(
    name: str, estimator: Any, methods: tuple[str, ...] = ("fit", "predict")
) -> None:
    missing = [m for m in methods if not hasattr(estimator, m)]
    if missing:
        raise InvalidParameterError(
            name,
            f"expected a scikit-learn estimator with {' and '.join(methods)}, got "
            f"{type(estimator).__name__} (missing {', '.join(missing)})",
        )


def nan_allowed(estimator: Any) -> bool:
    """Whether ``estimator`` may be given NaN in ``X``, as far as the driver can tell.

    Its tags for a plain estimator. A Pipeline's tags say False even when its first step
    imputes, so a Pipeline asks its first step, and other composites (a ColumnTransformer,
    a FeatureUnion) count as allowing it: their members decide on the workers, as in
    scikit-learn's ensembles, which never check for NaN themselves.
    """
    from sklearn.utils import get_tags

    steps = getattr(estimator, "steps", None)
    if isinstance(steps, list) and steps:
        first = next((s for _, s in steps if s is not None and s != "passthrough"), None)
        return first is None or nan_allowed(first)
    if hasattr(estimator, "transformers") or hasattr(estimator, "transformer_list"):
        return True
    return bool(get_tags(estimator).input_tags.allow_nan)


def weight_key(estimator: Any) -> tuple[str, Any]:
    """The fit parameter that gives ``estimator`` sample weights, and the estimator that
    takes them: a Pipeline's final step's (``clf__sample_weight``), nested ones too."""
    prefix, final = final_step(estimator)
    return f"{prefix}sample_weight", final


def check_takes_sample_weight(name: str, estimator: Any) -> None:
    """InvalidParameterError, before any work, if ``estimator.fit`` takes no
    ``sample_weight`` (scikit-learn's ensembles raise a TypeError then)."""
    from sklearn.utils.validation import has_fit_parameter

    if not has_fit_parameter(estimator, "sample_weight"):
        raise InvalidParameterError(
            "sample_weight",
            f"{name} ({type(estimator).__name__}) does not take sample_weight in fit: drop "
            "sample_weight, or that estimator",
        )


def entropy_of(random_state: Any) -> int:
    """The non-negative integer every member's seed derives from.

    ``None``: fresh entropy (a different ensemble each fit); an ``int``: itself; a
    ``numpy.random.RandomState`` or ``Generator``: one draw from it (so it advances, as in
    scikit-learn).
    """
    if random_state is None:
        return int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if int(random_state) < 0:
            raise InvalidParameterError(
                "random_state", f"expected a non-negative integer, got {random_state}"
            )
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63))
    raise InvalidParameterError(
        "random_state",
        f"expected None, a non-negative int, a numpy RandomState or Generator, got {random_state!r}",
    )


def sample_weight_of(sample_weight: Any, n_samples: int) -> np.ndarray | None:
    """``sample_weight`` as a float array of ``n_samples`` non-negative weights, or None."""
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Number):
        return np.full(n_samples, float(sample_weight))  # type: ignore[arg-type]
    sw = np.asarray(sample_weight, dtype=np.float64)
    if sw.shape != (n_samples,):
        raise InvalidParameterError(
            "sample_weight", f"expected shape ({n_samples},) like y, got {sw.shape}"
        )
    if not np.all(np.isfinite(sw)) or (sw < 0).any():
        raise InvalidParameterError("sample_weight", "expected finite, non-negative weights")
    if sw.sum() <= 0:
        raise InvalidParameterError(
            "sample_weight", "every weight is zero: at least one must be positive"
        )
    return sw


class ClientParam:
    """The ``client`` parameter is a handle to a shared cluster, not state (as in SearchCV).

    ``clone`` shares it instead of deep-copying it; pickling (and so registering) an
    ensemble keeps an address but never a live Client.
    """

    def __sklearn_clone__(self) -> Any:
        from sklearn.base import clone

        params = self.get_params(deep=False)  # type: ignore[attr-defined]
        client = params.pop("client")
        cls: Any = type(self)
        return cls(client=client, **{k: clone(v, safe=False) for k, v in params.items()})

    def __getstate__(self) -> dict[str, Any]:
        parent: Any = super()
        state = dict(parent.__getstate__())
        if not isinstance(state.get("client"), (str, type(None))):
            state["client"] = None
        return state
