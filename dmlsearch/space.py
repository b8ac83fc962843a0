"""Search spaces: ``Float``, ``Int``, ``Categorical`` and lists of sub-spaces.

A search space is what a strategy draws candidates from. It accepts, as is, what
scikit-learn accepts: a ``param_grid`` (a dict of lists, or a list of such dicts) and
``param_distributions`` (lists and scipy.stats frozen distributions). A list of
sub-spaces is how conditional parameters are written, exactly as in scikit-learn::

    [{"kernel": ["rbf"], "gamma": Float(1e-4, 1, log=True)},
     {"kernel": ["poly"], "degree": Int(2, 5)}]

This module is pure: no Dask, no I/O.
"""

from __future__ import annotations

import math
import numbers
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from typing import Any

import numpy as np

from .exceptions import SearchSpaceError

__all__ = [
    "Categorical",
    "Dimension",
    "Distribution",
    "Float",
    "Int",
    "SearchSpace",
    "as_space",
    "describe_value",
]

#: How a value looks once stored (the registry's JSON round trip); identity by default.
StoredForm = Callable[[Any], Any]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


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


def _same_stored(a: Any, b: Any, *, strict: bool) -> bool:
    """Equality of two stored (JSON) values; ``strict`` also requires equal types."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(
            _same_stored(x, y, strict=strict) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_stored(a[k], b[k], strict=strict) for k in a)
    if strict and type(a) is not type(b):
        return False
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class Dimension(ABC):
    """One parameter's domain.

    Subclasses are immutable value objects. ``sample`` must draw only from the ``rng``
    it is given, so that a seed fixes the draw. ``grid_values`` returns the finite list
    of values a grid search enumerates, or raises :class:`SearchSpaceError` when the
    dimension is continuous.
    """

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> Any:
        """Draw one value."""

    @abstractmethod
    def grid_values(self, name: str) -> list[Any]:
        """The values a grid search tries, in order."""

    @property
    def is_finite(self) -> bool:
        """Whether ``grid_values`` can enumerate this dimension."""
        return True

    def grid_sequence(self, name: str) -> Sequence[Any]:
        """``grid_values`` as an indexable sequence (lazy where the dimension allows)."""
        return self.grid_values(name)

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly description, equal for dimensions that draw the same values."""
        return {"type": describe_value(type(self)), "repr": describe_value(repr(self))}

    def decode(self, stored: Any, stored_form: StoredForm) -> Any:
        """The value of this dimension stored as ``stored``; ValueError if there is none.

        The default accepts ``stored`` as it is; the built-in dimensions check it.
        """
        return stored


#: The widest integer range ``Int`` can sample from (numpy draws 64-bit integers).
_INT_SPAN = 2**63 - 2


def _check_log(name: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise SearchSpaceError(name, f"must be True or False, got {value!r}")


def _check_number(name: str, value: Any, integral: bool) -> None:
    kinds: tuple[type, ...] = (numbers.Integral,) if integral else (numbers.Real,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if integral else "a real number"
        raise SearchSpaceError(name, f"must be {kind}, got {value!r}")
    if not integral and not math.isfinite(float(value)):  # type: ignore[arg-type]
        raise SearchSpaceError(name, f"must be finite, got {value!r}")


@dataclass(frozen=True)
class Float(Dimension):
    """A real number in ``[low, high]``; ``log=True`` samples uniformly in log space."""

    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        _check_number("Float.low", self.low, integral=False)
        _check_number("Float.high", self.high, integral=False)
        _check_log("Float.log", self.log)
        if self.low > self.high:
            raise SearchSpaceError(
                "Float.low", f"low={self.low!r} is greater than high={self.high!r}; swap them"
            )
        if not math.isfinite(float(self.high) - float(self.low)):
            raise SearchSpaceError(
                "Float.high", f"the range [{self.low!r}, {self.high!r}] is too wide to sample"
            )
        if self.log and self.low <= 0:
            raise SearchSpaceError("Float.low", f"log=True needs low > 0, got low={self.low!r}")

    def sample(self, rng: np.random.Generator) -> float:
        if self.log:
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return float(rng.uniform(self.low, self.high))

    def grid_values(self, name: str) -> list[Any]:
        if self.low == self.high:
            return [float(self.low)]
        raise SearchSpaceError(
            name,
            f"{self!r} is continuous and cannot be enumerated by a grid search; "
            "give a list of values, or use strategy='random' or a model-based strategy",
        )

    @property
    def is_finite(self) -> bool:
        return self.low == self.high

    def describe(self) -> dict[str, Any]:
        return {"type": "float", "low": float(self.low), "high": float(self.high), "log": self.log}

    def decode(self, stored: Any, stored_form: StoredForm) -> float:
        if not _is_real(stored) or not self.low <= stored <= self.high:
            raise ValueError(f"{stored!r} is not a number in [{self.low}, {self.high}]")
        return float(stored)


@dataclass(frozen=True)
class Int(Dimension):
    """An integer in ``[low, high]`` (both included), on a ``step``; ``log=True`` for scales."""

    low: int
    high: int
    log: bool = False
    step: int = 1

    def __post_init__(self) -> None:
        _check_number("Int.low", self.low, integral=True)
        _check_number("Int.high", self.high, integral=True)
        _check_number("Int.step", self.step, integral=True)
        _check_log("Int.log", self.log)
        if self.low > self.high:
            raise SearchSpaceError(
                "Int.low", f"low={self.low!r} is greater than high={self.high!r}; swap them"
            )
        if int(self.high) - int(self.low) > _INT_SPAN:
            raise SearchSpaceError(
                "Int.high",
                f"the range [{self.low!r}, {self.high!r}] spans more than 2**63 - 2 integers",
            )
        if self.step < 1:
            raise SearchSpaceError("Int.step", f"must be >= 1, got {self.step!r}")
        if self.log and self.low <= 0:
            raise SearchSpaceError("Int.low", f"log=True needs low >= 1, got low={self.low!r}")
        if self.log and self.step != 1:
            raise SearchSpaceError("Int.step", "log=True works only with step=1")

    def sample(self, rng: np.random.Generator) -> int:
        if self.log:
            # Round in log space so that every integer keeps its share of the log scale.
            lo, hi = math.log(self.low - 0.5 + 1e-12), math.log(self.high + 0.5)
            value = round(math.exp(rng.uniform(lo, hi)))
            return int(min(max(value, self.low), self.high))
        n = (int(self.high) - int(self.low)) // int(self.step)
        return int(self.low) + int(self.step) * int(rng.integers(0, n + 1))

    def grid_values(self, name: str) -> list[Any]:
        return list(self.grid_sequence(name))

    def grid_sequence(self, name: str) -> range:
        # A range indexes in O(1): a grid of 10**12 points is never materialised.
        return range(int(self.low), int(self.high) + 1, int(self.step))

    def describe(self) -> dict[str, Any]:
        return {
            "type": "int",
            "low": int(self.low),
            "high": int(self.high),
            "log": self.log,
            "step": int(self.step),
        }

    def decode(self, stored: Any, stored_form: StoredForm) -> int:
        integral = _is_real(stored) and float(stored).is_integer()
        if (
            not integral
            or not self.low <= stored <= self.high
            or (int(stored) - int(self.low)) % int(self.step)
        ):
            raise ValueError(
                f"{stored!r} is not an integer in [{self.low}, {self.high}] on step {self.step}"
            )
        return int(stored)


@dataclass(frozen=True)
class Categorical(Dimension):
    """One of a finite list of choices (any Python objects, estimators included)."""

    choices: tuple[Any, ...]

    def __init__(self, choices: Sequence[Any] | np.ndarray) -> None:
        if isinstance(choices, (str, bytes)) or not isinstance(choices, (Sequence, np.ndarray)):
            raise SearchSpaceError(
                "Categorical.choices", f"must be a list of choices, got {choices!r}"
            )
        values = tuple(choices)
        if len(values) == 0:
            raise SearchSpaceError("Categorical.choices", "must not be empty")
        object.__setattr__(self, "choices", values)

    def sample(self, rng: np.random.Generator) -> Any:
        return self.choices[int(rng.integers(0, len(self.choices)))]

    def grid_values(self, name: str) -> list[Any]:
        return list(self.choices)

    def describe(self) -> dict[str, Any]:
        return {"type": "categorical", "choices": [describe_value(c) for c in self.choices]}

    def decode(self, stored: Any, stored_form: StoredForm) -> Any:
        forms = [stored_form(c) for c in self.choices]
        # Same type first (1, 1.0 and True are three choices), then plain equality.
        for strict in (True, False):
            for choice, form in zip(self.choices, forms, strict=True):
                if _same_stored(form, stored, strict=strict):
                    return choice
        raise ValueError(f"{stored!r} is not one of the choices {list(self.choices)!r}")


def _dist_label(dist: Any) -> str:
    """``randint(5, 1)`` for a scipy frozen distribution, else its repr."""
    name = getattr(getattr(dist, "dist", None), "name", None)
    if name is None:
        return repr(dist)
    args = [repr(a) for a in getattr(dist, "args", ())]
    args += [f"{k}={v!r}" for k, v in getattr(dist, "kwds", {}).items()]
    return f"{name}({', '.join(args)})"


@dataclass(frozen=True, eq=False)
class Distribution(Dimension):
    """Any object with ``rvs(random_state=...)``: a scipy.stats frozen distribution, say."""

    dist: Any = field()

    def __post_init__(self) -> None:
        if not callable(getattr(self.dist, "rvs", None)):
            raise SearchSpaceError(
                "Distribution.dist",
                f"expected an object with an rvs(random_state=...) method, got {self.dist!r}",
            )
        support = getattr(self.dist, "support", None)
        if callable(support):
            try:
                low, high = support()
                broken = bool(np.isnan(low) or np.isnan(high))
            except Exception:  # not scipy's support(): nothing to check here
                broken = False
            if broken:
                # scipy marks invalid shape parameters (a scale <= 0, randint(5, 1)) this
                # way; its rvs would raise a "domain error" in the middle of the search.
                raise SearchSpaceError(
                    "Distribution.dist",
                    f"{_dist_label(self.dist)} has invalid parameters (scipy gives it no "
                    "support): check its bounds and that its scale is > 0",
                )

    def sample(self, rng: np.random.Generator) -> Any:
        value = self.dist.rvs(random_state=rng)
        if isinstance(value, np.generic):
            return value.item()
        return value

    def grid_values(self, name: str) -> list[Any]:
        raise SearchSpaceError(
            name,
            "a distribution cannot be enumerated by a grid search; give a list of values "
            "or use strategy='random'",
        )

    @property
    def is_finite(self) -> bool:
        return False

    def describe(self) -> dict[str, Any]:
        family = getattr(self.dist, "dist", None)
        name = getattr(family, "name", None)
        if name is None:
            return {"type": "distribution", "repr": describe_value(self.dist)}
        return {
            "type": "distribution",
            "name": name,
            "args": describe_value(tuple(getattr(self.dist, "args", ()))),
            "kwds": describe_value(dict(getattr(self.dist, "kwds", {}))),
        }

    def decode(self, stored: Any, stored_form: StoredForm) -> Any:
        support = getattr(self.dist, "support", None)
        if _is_real(stored) and callable(support):
            low, high = support()
            if not low <= stored <= high:
                raise ValueError(f"{stored!r} is outside the support [{low}, {high}]")
        return stored


def _as_dimension(name: str, value: Any) -> Dimension:
    if isinstance(value, Dimension):
        return value
    if hasattr(value, "rvs"):
        try:
            return Distribution(value)
        except SearchSpaceError as exc:
            raise SearchSpaceError(name, str(exc).partition(": ")[2]) from None
    if isinstance(value, (str, bytes)):
        raise SearchSpaceError(
            name,
            f"a string ({value!r}) is not a list of choices; write [{value!r}] to fix the value",
        )
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise SearchSpaceError(
                name, f"an array of choices must be 1-d, got shape {value.shape}"
            )
        value = list(value)
    if isinstance(value, (Sequence, set, frozenset)):
        if isinstance(value, (set, frozenset)):
            raise SearchSpaceError(name, "a set has no order; give a list of choices")
        if len(value) == 0:
            raise SearchSpaceError(name, "the list of choices is empty")
        return Categorical(list(value))
    raise SearchSpaceError(
        name,
        f"expected a list of values, a scipy.stats distribution, Float, Int or Categorical; "
        f"got {value!r}",
    )


@dataclass(frozen=True)
class SearchSpace:
    """A list of sub-spaces; a candidate comes from exactly one of them.

    Within a sub-space parameters are listed in sorted order, as scikit-learn's
    ``ParameterGrid`` does, so a grid is enumerated in the same order.
    """

    subspaces: tuple[dict[str, Dimension], ...]

    @property
    def is_finite(self) -> bool:
        return all(dim.is_finite for sub in self.subspaces for dim in sub.values())

    @property
    def param_names(self) -> list[str]:
        names: dict[str, None] = {}
        for sub in self.subspaces:
            for key in sorted(sub):
                names[key] = None
        return list(names)

    @cached_property
    def _grids(self) -> list[tuple[list[str], list[Sequence[Any]], int]]:
        # Built once: a strategy asks for grid points one by one, and rebuilding the value
        # lists per point made a 10,000-point grid quadratic.
        grids = []
        for i, sub in enumerate(self.subspaces):
            keys = sorted(sub)
            values = [sub[k].grid_sequence(_where(i, k, len(self.subspaces))) for k in keys]
            grids.append((keys, values, math.prod(_length(v) for v in values)))
        return grids

    def grid_size(self) -> int:
        return sum(size for _, _, size in self._grids)

    def grid_point(self, index: int) -> dict[str, Any]:
        """The ``index``-th point of the grid, without enumerating those before it."""
        if index < 0:
            raise IndexError("grid index out of range")
        for keys, values, size in self._grids:
            if index >= size:
                index -= size
                continue
            out: dict[str, Any] = {}
            # The last key varies fastest, as itertools.product does.
            for key, vals in zip(reversed(keys), reversed(values), strict=True):
                index, offset = divmod(index, _length(vals))
                out[key] = vals[offset]
            return dict(sorted(out.items()))
        raise IndexError("grid index out of range")

    def iter_grid(self) -> Any:
        for keys, values, _ in self._grids:
            for combo in product(*values):
                yield dict(zip(keys, combo, strict=True))

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        """Pick a sub-space uniformly, then draw each of its parameters in sorted order."""
        sub = self.subspaces[int(rng.integers(0, len(self.subspaces)))]
        return {key: sub[key].sample(rng) for key in sorted(sub)}

    def describe(self) -> list[dict[str, Any]]:
        """A JSON-friendly description: equal for spaces that give the same candidates."""
        return [{key: sub[key].describe() for key in sorted(sub)} for sub in self.subspaces]

    def decode(
        self, stored: Mapping[str, Any], stored_form: StoredForm = lambda value: value
    ) -> dict[str, Any]:
        """The candidate whose stored form is ``stored`` (object choices become objects).

        ``stored_form`` maps a value to how it was stored (the registry's JSON round trip
        keeps numbers, turns tuples into lists and objects into their ``repr``). Raises
        ``ValueError`` saying why when no sub-space holds ``stored``.
        """
        reasons = []
        for i, sub in enumerate(self.subspaces):
            if set(sub) != set(stored):
                continue
            out: dict[str, Any] = {}
            for key in sorted(sub):
                try:
                    out[key] = sub[key].decode(stored[key], stored_form)
                except ValueError as exc:
                    reasons.append(f"{_where(i, key, len(self.subspaces))}: {exc}")
                    break
            else:
                return out
        if not reasons:
            raise ValueError(f"no sub-space has exactly the parameters {sorted(stored)}")
        raise ValueError("; ".join(reasons))


def _length(values: Sequence[Any]) -> int:
    if isinstance(values, range):  # len() overflows above sys.maxsize
        return max(0, (values.stop - values.start + values.step - 1) // values.step)
    return len(values)


def _where(i: int, key: str, n: int) -> str:
    return f"search_space[{i}][{key!r}]" if n > 1 else f"search_space[{key!r}]"


def as_space(obj: Any) -> SearchSpace:
    """Turn what a user gave as ``search_space`` into a :class:`SearchSpace`.

    Accepts a ``SearchSpace``, a mapping of parameter name to values, or a non-empty list
    of such mappings. Raises :class:`SearchSpaceError` naming the offending entry.
    """
    if isinstance(obj, SearchSpace):
        return obj
    if isinstance(obj, Mapping):
        items: list[Any] = [obj]
    elif isinstance(obj, (list, tuple)):
        if len(obj) == 0:
            raise SearchSpaceError("search_space", "the list of sub-spaces is empty")
        items = list(obj)
    else:
        raise SearchSpaceError(
            "search_space",
            f"expected a dict of parameter -> values or a list of such dicts, got {type(obj).__name__}",
        )
    subspaces = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise SearchSpaceError(
                f"search_space[{i}]", f"expected a dict of parameter -> values, got {item!r}"
            )
        sub: dict[str, Dimension] = {}
        for key, value in item.items():
            if not isinstance(key, str) or not key:
                raise SearchSpaceError(
                    f"search_space[{i}]", f"parameter names must be non-empty strings, got {key!r}"
                )
            sub[key] = _as_dimension(_where(i, key, len(items)), value)
        subspaces.append(sub)
    return SearchSpace(tuple(subspaces))
