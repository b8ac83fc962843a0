"""One parameter's domain: ``Dimension`` and ``Float``, ``Int``, ``Categorical``, ``Distribution``.

Separate from the :class:`~dmlsearch.space.SearchSpace` container and from ``as_space``
(what a user gives, turned into dimensions), both in :mod:`dmlsearch.space`, which
re-exports these types: import them from there. Pure: no Dask, no I/O.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._space_values import StoredForm, _is_real, _same_stored, describe_value
from .exceptions import SearchSpaceError

__all__ = ["Categorical", "Dimension", "Distribution", "Float", "Int"]


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
        # Then a repr recorded by another process (a function's holds its address there).
        found = [
            choice
            for choice, form in zip(self.choices, forms, strict=True)
            if _same_stored(form, stored, strict=False, addresses=False)
        ]
        if len(found) == 1:
            return found[0]
        if found:
            raise ValueError(
                f"{stored!r} matches {len(found)} of the choices {list(self.choices)!r} "
                "(objects whose reprs differ only by memory address: give them distinct "
                "names or reprs)"
            )
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
