"""The ``search.space`` mapping: dimensions written in the file, parsed into dmlsearch.space types.

Separate from the ``search`` section (``_search``) because the root section and the
builders also walk a parsed space (``_dimensions``), and because this is where the file's
own dimension syntax (``{type: float, low, high, log}``, lists of choices, conditional
sub-spaces) is checked, problem by problem, before ``Float``/``Int``/``Categorical`` see it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._common import Loc, _Problems, _short, _suggest
from ._imports import _build_value

_DIM_KEYS: dict[str, tuple[str, ...]] = {
    "float": ("type", "low", "high", "log"),
    "int": ("type", "low", "high", "log", "step"),
    "categorical": ("type", "choices"),
}


def _number(value: Any, loc: Loc, problems: _Problems, *, integral: bool) -> Any:
    kind = "an integer" if integral else "a number"
    if isinstance(value, bool) or value is None:
        problems.add(loc, f"expected {kind}, got {value!r}", value)
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            problems.add(loc, f"expected {kind}, got {value!r}", value)
            return None
    if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        problems.add(loc, f"expected a finite number, got {value!r}", value)
        return None
    number = float(value)
    if integral:
        if number != int(number):
            problems.add(loc, f"expected an integer, got {value!r}", value)
            return None
        return int(number)
    return number


def _parse_dimension(value: Any, loc: Loc, problems: _Problems, base_dir: Path | None) -> Any:
    from ..exceptions import SearchSpaceError
    from ..space import Categorical, Float, Int

    if isinstance(value, list):
        if not value:
            problems.add(loc, "the list of choices is empty")
            return None
        choices = [_build_value(v, (*loc, i), problems, base_dir) for i, v in enumerate(value)]
        return Categorical(choices)
    if not isinstance(value, dict):
        problems.add(
            loc,
            f"expected a list of choices or {{type: float|int|categorical, ...}}, got {value!r}; "
            f"a fixed value belongs in model.params (or write [{value!r}])",
            value,
        )
        return None
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in _DIM_KEYS:
        if "type" not in value:
            problems.add(loc, "missing type: float, int or categorical (or give a list of choices)")
        else:
            hint = _suggest(str(kind), list(_DIM_KEYS)) if isinstance(kind, str) else ""
            shown = repr(kind) if isinstance(kind, str) else _short(kind)
            problems.add(
                (*loc, "type"),
                f"unknown type {shown}; use float, int or categorical{hint}",
                kind,
            )
        return None
    allowed = _DIM_KEYS[kind]
    bad_keys = False
    for key in value:
        if key not in allowed:
            problems.add(
                (*loc, key),
                f"unknown key {key!r} in this {kind} dimension{_suggest(str(key), allowed)} "
                f"(keys: {', '.join(allowed)})",
                key,
            )
            bad_keys = True
    try:
        if kind == "categorical":
            listed = value.get("choices")
            if not isinstance(listed, list) or not listed:
                problems.add((*loc, "choices"), "expected a non-empty list of choices", listed)
                return None
            built = [
                _build_value(v, (*loc, "choices", i), problems, base_dir)
                for i, v in enumerate(listed)
            ]
            return None if bad_keys else Categorical(built)
        integral = kind == "int"
        bounds = {}
        for key in ("low", "high"):
            if key not in value:
                problems.add((*loc, key), "required")
            else:
                bounds[key] = _number(value[key], (*loc, key), problems, integral=integral)
        log = value.get("log", False)
        if not isinstance(log, bool):
            problems.add((*loc, "log"), f"expected true or false, got {log!r}", log)
            return None
        step = 1
        if "step" in value:
            step = _number(value["step"], (*loc, "step"), problems, integral=True)
        if bad_keys or None in bounds.values() or len(bounds) < 2 or step is None:
            return None
        if integral:
            return Int(bounds["low"], bounds["high"], log=log, step=step)
        return Float(bounds["low"], bounds["high"], log=log)
    except SearchSpaceError as exc:
        field = exc.param.rpartition(".")[2]
        message = str(exc)[len(exc.param) + 2 :]
        problems.add((*loc, field) if field in allowed else loc, message)
        return None


def _parse_space(raw: Any, problems: _Problems, base_dir: Path | None) -> Any:
    if isinstance(raw, dict):
        subspaces, single = [raw], True
    elif isinstance(raw, list):
        if not raw:
            problems.add((), "the list of sub-spaces is empty")
            return None
        subspaces, single = raw, False
    else:
        problems.add(
            (),
            "expected a mapping of parameter -> dimension, or a list of such mappings "
            f"(conditional sub-spaces); got {type(raw).__name__}",
        )
        return None
    out: list[dict[str, Any]] = []
    for i, sub in enumerate(subspaces):
        prefix: Loc = () if single else (i,)
        if not isinstance(sub, dict):
            problems.add(prefix, f"expected a mapping of parameter -> dimension, got {sub!r}")
            continue
        dims: dict[str, Any] = {}
        for name, value in sub.items():
            if not isinstance(name, str) or not name:
                problems.add((*prefix, str(name)), f"parameter names are strings, got {name!r}")
                continue
            dims[name] = _parse_dimension(value, (*prefix, name), problems, base_dir)
        out.append(dims)
    if problems:
        return None
    return out[0] if single else out


def _dimensions(space: Any) -> Iterator[tuple[Loc, Any]]:
    if isinstance(space, dict):
        for name, dim in space.items():
            yield (name,), dim
    elif isinstance(space, list):
        for i, sub in enumerate(space):
            for name, dim in sub.items():
                yield (i, name), dim
