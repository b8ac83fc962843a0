"""Search spaces: ``Float``, ``Int``, ``Categorical`` and lists of sub-spaces.

A search space is what a strategy draws candidates from. It accepts, as is, what
scikit-learn accepts: a ``param_grid`` (a dict of lists, or a list of such dicts) and
``param_distributions`` (lists and scipy.stats frozen distributions). A list of
sub-spaces is how conditional parameters are written, exactly as in scikit-learn::

    [{"kernel": ["rbf"], "gamma": Float(1e-4, 1, log=True)},
     {"kernel": ["poly"], "degree": Int(2, 5)}]

This module is pure: no Dask, no I/O.

The types are split by job: ``_space_values`` (``describe_value``, how values are stored),
``_space_dimensions`` (``Float``, ``Int``, ``Categorical``, ``Distribution``) and this
module (the ``SearchSpace`` container and ``as_space``, which turns scikit-learn grids,
distributions and lists of sub-spaces into one). Import every public name from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import product
from typing import Any

import numpy as np

from ._space_dimensions import Categorical, Dimension, Distribution, Float, Int
from ._space_values import StoredForm, describe_value
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

    def _locate(self, index: int) -> tuple[int, int]:
        """(sub-space, index within it) of the ``index``-th grid point."""
        if index < 0:
            raise IndexError("grid index out of range")
        for sub, (_, _, size) in enumerate(self._grids):
            if index < size:
                return sub, index
            index -= size
        raise IndexError("grid index out of range")

    def grid_subspace(self, index: int) -> int:
        """The sub-space the ``index``-th grid point is from (two may share names)."""
        return self._locate(index)[0]

    def grid_point(self, index: int) -> dict[str, Any]:
        """The ``index``-th point of the grid, without enumerating those before it."""
        sub, index = self._locate(index)
        keys, values, _ = self._grids[sub]
        out: dict[str, Any] = {}
        # The last key varies fastest, as itertools.product does.
        for key, vals in zip(reversed(keys), reversed(values), strict=True):
            index, offset = divmod(index, _length(vals))
            out[key] = vals[offset]
        return dict(sorted(out.items()))

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
                    _where(i, key, len(items)),
                    f"parameter names must be non-empty strings, got {key!r} "
                    f"({type(key).__name__})",
                )
            sub[key] = _as_dimension(_where(i, key, len(items)), value)
        subspaces.append(sub)
    return SearchSpace(tuple(subspaces))
