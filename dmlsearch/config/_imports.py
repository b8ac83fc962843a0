"""Importing user code by path, and building {class, params} specs."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationInfo,
)

from ._common import Loc, _Problems, _suggest

# -- imports -------------------------------------------------------------------------------

_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?$")


class _ImportFailed(Exception):
    pass


@functools.lru_cache(maxsize=256)
def _submodules(package: str) -> tuple[str, ...]:
    if not package:
        return tuple(sorted(m.name for m in pkgutil.iter_modules()))
    try:
        module = importlib.import_module(package)
    except Exception:
        return ()
    path = getattr(module, "__path__", None)
    if path is None:
        return ()
    return tuple(sorted(f"{package}.{m.name}" for m in pkgutil.iter_modules(path)))


def _with_folder(base_dir: Path | None) -> None:
    # Modules next to the experiment file (a data loader, a custom estimator) import as
    # top-level modules: the file's folder goes to the front of sys.path.
    if base_dir is not None:
        folder = str(base_dir)
        if folder not in sys.path:
            sys.path.insert(0, folder)


def _import_module(name: str, base_dir: Path | None) -> Any:
    _with_folder(base_dir)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if name == missing or name.startswith(missing + "."):
            parent = missing.rpartition(".")[0]
            hint = _suggest(missing, _submodules(parent))
            raise _ImportFailed(f"no module named {missing!r}{hint}") from None
        raise _ImportFailed(f"importing {name!r} failed: {exc}") from None
    except Exception as exc:
        raise _ImportFailed(f"importing {name!r} failed: {type(exc).__name__}: {exc}") from None


@functools.lru_cache(maxsize=1024)
def _import_cached(path: str, base_dir: Path | None) -> Any:
    if not _IMPORT_PATH.match(path):
        raise _ImportFailed(
            f"{path!r} is not an import path; write module.Name or module:name "
            "(e.g. sklearn.svm.SVC)"
        )
    if ":" in path:
        module_name, attr = path.split(":", 1)
    else:
        module_name, _, attr = path.rpartition(".")
        if not module_name:
            raise _ImportFailed(
                f"{path!r} names no module; write module.Name (e.g. sklearn.svm.SVC)"
            )
    obj = _import_module(module_name, base_dir)
    where = module_name
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            public = [n for n in dir(obj) if not n.startswith("_")]
            raise _ImportFailed(
                f"{where!r} has no attribute {part!r}{_suggest(part, public)}"
            ) from None
        where = f"{where}.{part}"
    return obj


def _import(path: str, base_dir: Path | None) -> Any:
    return _import_cached(path, base_dir)


def _spec_class(
    spec: dict[Any, Any],
    loc: Loc,
    problems: _Problems,
    base_dir: Path | None,
    class_loc: Loc | None,
    *,
    estimator: bool,
) -> Any:
    """The class a spec names (None, with the problem recorded, if it cannot be used)."""
    class_loc = (*loc, "class") if class_loc is None else class_loc
    for key in spec:
        if key not in _SPEC_KEYS:
            problems.add(
                (*loc, key),
                f"unknown key {key!r}{_suggest(str(key), _SPEC_KEYS)} (an object is "
                "written {class: import.path, params: {...}})",
                key,
            )
    path = spec.get("class")
    if not isinstance(path, str) or not path:
        problems.add(class_loc, "expected an import path such as sklearn.svm.SVC", path)
        return None
    try:
        cls = _import(path, base_dir)
    except _ImportFailed as exc:
        problems.add(class_loc, str(exc), path)
        return None
    if estimator and not (
        isinstance(cls, type) and hasattr(cls, "fit") and hasattr(cls, "get_params")
    ):
        problems.add(
            class_loc,
            f"{path} is not an estimator class (a scikit-learn estimator has fit and get_params)",
            path,
        )
        return None
    if not callable(cls):
        problems.add(class_loc, f"{path} is not a class or a function", path)
        return None
    return cls


def _spec_params(
    spec: dict[Any, Any], loc: Loc, problems: _Problems, base_dir: Path | None, *, net: bool
) -> dict[str, Any]:
    """A spec's ``params``, every nested spec built (a net's parts as classes: see below)."""
    raw_params = spec.get("params")
    if raw_params is None:
        raw_params = {}
    if not isinstance(raw_params, dict):
        problems.add((*loc, "params"), "expected a mapping of parameter -> value", raw_params)
        raw_params = {}
    params: dict[str, Any] = {}
    for name, value in raw_params.items():
        if not isinstance(name, str) or not name.isidentifier():
            problems.add((*loc, "params", name), f"parameter names are identifiers, got {name!r}")
            continue
        if net and name in NET_PARTS and (isinstance(value, str) or _is_spec(value)):
            parts = _net_part(name, value, (*loc, "params", name), problems, base_dir)
            for key in parts:
                if key in raw_params and key != name:
                    problems.add(
                        (*loc, "params", key), f"given twice: here and in params.{name}.params"
                    )
            # On a problem (recorded) the name stays, else the net is 'missing' it too.
            params.update(parts or {name: None})
        else:
            params[name] = _build_value(value, (*loc, "params", name), problems, base_dir)
    return params


def _known_params(cls: Any, named: list[str]) -> list[str]:
    """The named constructor arguments and what a default instance's ``get_params`` lists
    (xgboost's wrappers name only ``objective`` and take the rest as ``**kwargs``)."""
    try:
        listed = list(cls().get_params(deep=False))
    except Exception:  # a class that needs arguments: its named ones are all we know
        listed = []
    return sorted({*named, *listed})


def _misspelt_keywords(
    name: str, params: dict[str, Any], accepted: list[str], loc: Loc, problems: _Problems
) -> list[str]:
    """The names close to a parameter of an estimator that takes any keyword (each
    recorded): it would set them without a word, and its model ignore them."""
    from .._validation import close_parameter

    bad = []
    for given in params:
        if given in accepted or "__" in given:
            continue
        close = close_parameter(given, accepted)
        if close is not None:
            bad.append(given)
            problems.add(
                (*loc, "params", given),
                f"{name} has no parameter {given!r}; did you mean {close!r}? ({name} takes "
                "any keyword, and its model would ignore this one)",
                given,
            )
    return bad


def _checked_params(
    cls: Any, params: dict[str, Any], loc: Loc, problems: _Problems, supplied: tuple[str, ...] = ()
) -> tuple[dict[str, Any], int] | None:
    """``params`` less the names ``cls`` does not take (each recorded), and their number;
    None when the rest (with ``supplied``, given by the caller later) cannot be bound to
    its signature."""
    name = getattr(cls, "__name__", repr(cls))
    # A problem with one parameter must not hide another: every unknown name is reported,
    # then the values of the known ones are checked.
    unknown: list[str] = []
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return params, 0
    accepted = [
        p.name
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        if hasattr(cls, "get_params"):  # an estimator taking any keyword (xgboost's)
            unknown = _misspelt_keywords(name, params, _known_params(cls, accepted), loc, problems)
    else:
        for bad in params:
            if bad not in accepted:
                unknown.append(bad)
                problems.add(
                    (*loc, "params", bad),
                    f"{name} has no parameter {bad!r}{_suggest(bad, accepted)}",
                    bad,
                )
    params = {k: v for k, v in params.items() if k not in unknown}
    try:
        signature.bind(**params, **dict.fromkeys(supplied))
    except TypeError as exc:
        missing = re.search(r"missing a required argument: '(\w+)'", str(exc))
        where = (*loc, "params", missing.group(1)) if missing else (*loc, "params")
        problems.add(where, f"{name}: {exc}")
        return None
    return params, len(unknown)


# -- the parts of a torch net (skorch's module, criterion and optimizer) -------------------

#: Parameters of a skorch net that take a class, its arguments as ``<part>__<name>``.
NET_PARTS = {"module": "torch.nn", "criterion": "torch.nn", "optimizer": "torch.optim"}


def _is_net(cls: Any) -> bool:
    """A skorch net (``TorchClassifier`` and skorch's own): skorch is imported with it."""
    skorch = sys.modules.get("skorch")
    return skorch is not None and isinstance(cls, type) and issubclass(cls, skorch.NeuralNet)


def _net_part(
    part: str, value: Any, loc: Loc, problems: _Problems, base_dir: Path | None
) -> dict[str, Any]:
    """``module: {class: mods.MLP, params: {hidden: 16}}`` as ``module=MLP,
    module__hidden=16``: the net builds the module, its weights drawn from the net's
    ``random_state``, and a search can name ``module__hidden``. Built here, the module
    would keep the unseeded weights of the driver's process. A bare name is looked up in
    ``torch.nn`` (``torch.optim`` for the optimizer)."""
    spec = {"class": value} if isinstance(value, str) else value
    path = spec.get("class")
    if isinstance(path, str) and _IMPORT_PATH.match(path) and "." not in path and ":" not in path:
        spec = {**spec, "class": f"{NET_PARTS[part]}.{path}"}
    class_loc = loc if isinstance(value, str) else None
    cls = _spec_class(spec, loc, problems, base_dir, class_loc, estimator=False)
    params = _spec_params(spec, loc, problems, base_dir, net=False)
    if cls is None:
        return {}
    torch = sys.modules.get("torch")
    if (
        part == "module"
        and torch is not None
        and not (isinstance(cls, type) and issubclass(cls, torch.nn.Module))
    ):
        problems.add(class_loc or (*loc, "class"), f"{path} is not a torch.nn.Module class", path)
        return {}
    # skorch gives the optimizer the module's parameters.
    supplied = ("params",) if part == "optimizer" else ()
    checked = _checked_params(cls, params, loc, problems, supplied)
    if checked is None:
        return {}
    return {part: cls, **{f"{part}__{name}": v for name, v in checked[0].items()}}


def _invalid_values(obj: Any, given: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Each parameter of a scikit-learn estimator its declared constraints refuse.

    scikit-learn's own ``_validate_params`` stops at the first; checking the parameters one
    at a time reports them all. Returns ``(parameter or None, message)`` pairs.
    """
    try:
        from sklearn.utils._param_validation import validate_parameter_constraints
    except ImportError:  # pragma: no cover - a scikit-learn without the private helper
        validate_parameter_constraints = None
    caller = type(obj).__name__
    constraints = getattr(obj, "_parameter_constraints", None)
    if validate_parameter_constraints is None or not isinstance(constraints, dict):
        try:
            obj._validate_params()
        except (ValueError, TypeError) as exc:
            found = re.search(r"The '(\w+)' parameter", str(exc))
            return [(found.group(1) if found else None, str(exc))]
        return []
    out: list[tuple[str | None, str]] = []
    values = obj.get_params(deep=False)
    # The parameters written in the file first, then defaults an estimator may tie to them.
    for key in [*given, *(k for k in values if k not in given)]:
        if key not in constraints or key not in values:
            continue
        try:
            validate_parameter_constraints({key: constraints[key]}, {key: values[key]}, caller)
        except (ValueError, TypeError) as exc:
            out.append((key, str(exc)))
    return out


def _base_dir(info: ValidationInfo) -> Path | None:
    context = info.context if isinstance(info.context, dict) else {}
    base = context.get("base_dir")
    return Path(base) if base is not None else None


# -- building objects from {class, params} specs ------------------------------------------

_SPEC_KEYS = ("class", "params")


def _is_spec(value: Any) -> bool:
    return isinstance(value, dict) and "class" in value


def _build_value(value: Any, loc: Loc, problems: _Problems, base_dir: Path | None) -> Any:
    """Params as written, with every ``{class: ..., params: ...}`` mapping built."""
    if _is_spec(value):
        return _build_spec(value, loc, problems, base_dir)
    if isinstance(value, dict):
        return {k: _build_value(v, (*loc, k), problems, base_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_build_value(v, (*loc, i), problems, base_dir) for i, v in enumerate(value)]
    return value


def _build_spec(
    spec: Any,
    loc: Loc,
    problems: _Problems,
    base_dir: Path | None,
    *,
    estimator: bool = False,
    class_loc: Loc | None = None,
) -> Any:
    """Build ``{class: import.path, params: {...}}``; record problems rather than raise."""
    before = len(problems.items)
    if not isinstance(spec, dict):
        problems.add(loc, "expected {class: import.path, params: {...}}", spec)
        return None
    cls = _spec_class(spec, loc, problems, base_dir, class_loc, estimator=estimator)
    params = _spec_params(spec, loc, problems, base_dir, net=_is_net(cls))
    if cls is None:
        return None
    checked = _checked_params(cls, params, loc, problems)
    if checked is None:
        return None
    params, n_unknown = checked
    if len(problems.items) > before + n_unknown:
        return None  # a problem in this spec: constructing it would only add noise
    name = getattr(cls, "__name__", spec.get("class"))
    try:
        obj = cls(**params)
    except Exception as exc:
        problems.add((*loc, "params"), f"{name}(...) failed: {type(exc).__name__}: {exc}")
        return None
    # scikit-learn checks parameter values only in fit; its declared constraints let us
    # report `C: -1` now, with the parameter's path - every bad value, not the first.
    if hasattr(obj, "_parameter_constraints") and hasattr(obj, "_validate_params"):
        for param, message in _invalid_values(obj, params):
            problems.add((*loc, "params", param) if param else (*loc, "params"), message)
    if len(problems.items) > before:
        return None
    return obj
