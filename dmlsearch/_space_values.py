"""Values of a search space as they are described and stored: ``describe_value`` and equality.

Separate from the dimension types (``_space_dimensions``) because it is used on its own:
the search and the records describe estimators and schedulers with ``describe_value``, and
decoding a stored candidate compares JSON round-tripped values here. Re-exported by
:mod:`dmlsearch.space`.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["StoredForm", "base_params", "describe_value"]

#: How a value looks once stored (the registry's JSON round trip); identity by default.
StoredForm = Callable[[Any], Any]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def base_params(estimator: Any, subspaces: Any) -> dict[str, Any]:
    """The values ``estimator`` has for the parameters any of ``subspaces`` searches, where
    they are plain (bool, int, finite float, str, None; a function or an estimator is
    left out). What a trial that does not set one of them ran with, recorded so that
    ensemble selection from a registry can rebuild each trial's estimator."""
    try:
        params = estimator.get_params(deep=True)
    except Exception:  # the search reports a broken estimator itself
        return {}
    out: dict[str, Any] = {}
    for key in sorted({k for sub in subspaces for k in sub}):
        value = params.get(key, _MISSING)
        if isinstance(value, np.generic):
            value = value.item()
        plain = isinstance(value, (bool, int, str, type(None))) or (
            isinstance(value, float) and math.isfinite(value)
        )
        if plain:
            out[key] = value
    return out


_MISSING = object()


def describe_value(value: Any) -> Any:
    """A JSON-friendly description of ``value`` that is equal for equal configurations.

    Estimators are described by class and ``get_params(deep=False)``, recursively (their
    ``repr`` elides long parameter lists); functions and classes by qualified name; numpy
    scalars and arrays as Python numbers and lists; anything else by its ``repr`` without
    memory addresses. Used to tell whether a resumed search still has the same estimator
    and space.
    """
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return [describe_value(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [describe_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): describe_value(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        # A set's repr follows string hashing, which differs between processes (skorch
        # keeps its parameter names in one): sorted, a resume sees the same estimator.
        described = [describe_value(v) for v in value]
        return sorted(described, key=lambda d: json.dumps(d, sort_keys=True, default=str))
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    get_params = getattr(value, "get_params", None)
    if callable(get_params):
        try:
            params = get_params(deep=False)
        except Exception:  # a broken get_params falls back to the repr
            params = None
        if isinstance(params, Mapping):
            return {
                "class": describe_value(type(value)),
                "params": {str(k): describe_value(params[k]) for k in sorted(params)},
            }
    return _ADDRESS.sub("", repr(value))


def _same_stored(a: Any, b: Any, *, strict: bool, addresses: bool = True) -> bool:
    """Equality of two stored (JSON) values; ``strict`` also requires equal types;
    ``addresses=False`` ignores the memory addresses in reprs (see :func:`same_repr`)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(
            _same_stored(x, y, strict=strict, addresses=addresses)
            for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(
            _same_stored(a[k], b[k], strict=strict, addresses=addresses) for k in a
        )
    if not addresses and isinstance(a, str) and isinstance(b, str):
        return same_repr(a, b)
    if strict and type(a) is not type(b):
        return False
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def same_repr(a: str, b: str) -> bool:
    """Whether two stored reprs are equal but for memory addresses: the registry keeps a
    function or other object chosen in a space as its repr, and ``<function f at 0x..>``
    differs in each process, so a resumed search (a new process) compares them so."""
    return a == b or _ADDRESS.sub("", a) == _ADDRESS.sub("", b)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
