"""Experiment files: a versioned YAML schema, safe loading and the builders a run needs.

An experiment file says what to search (``data``, ``model``, ``search``), where to run
(``cluster``) and where to record (``registry``)::

    cfg = load_config("experiments/quickstart.yaml", overrides=["search.n_trials=5"])
    X, y = load_data(cfg)
    with make_registry(cfg) as registry, open_client(cfg) as client:
        search = build_search(cfg, client=client, registry=registry)
        search.fit(X, y)

Loading is safe against hostile YAML: the file size, nesting depth, alias count and the
size of the document once aliases are expanded are all capped while walking parser events,
before any Python object is built. Numbers follow YAML 1.2 (``1e-3`` is a float, ``yes`` is
a string). Every problem in a file is reported at once, as a :class:`ConfigError` naming
the field path and the line. See docs/config.md.

Nothing here imports Dask or scikit-learn at module level; the builders import what they
build.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import math
import numbers
import os
import pkgutil
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from .exceptions import DmlsearchError

if TYPE_CHECKING:
    from distributed import Client

    from .registry import Registry
    from .search import SearchCV

__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "SCHEMA_VERSION",
    "STARTER",
    "ClusterSection",
    "ConfigError",
    "DataSection",
    "ExperimentConfig",
    "LocalClusterSection",
    "ModelSection",
    "Problem",
    "RegistrySection",
    "SearchSection",
    "build_cv",
    "build_model",
    "build_search",
    "load_config",
    "load_data",
    "make_registry",
    "open_client",
    "parse_config",
    "run_experiment",
    "summary",
]

#: The schema version this dmlsearch reads (``version:`` in every file).
SCHEMA_VERSION = 1
#: Caps applied before any Python object is built from a file.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_ALIASES = 100
#: Nodes in the document once every alias is expanded (a "billion laughs" guard).
MAX_NODES = 100_000

STRATEGY_NAMES = ("random", "grid", "tpe", "cmaes", "gp", "nsga2")


# -- errors --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a file: where (dotted field path, line) and what to change.

    ``path`` is empty for problems with the file itself (size, YAML syntax).
    """

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f" (line {self.line})" if where else f"line {self.line}"
        return f"{where}: {self.message}" if where else self.message


class ConfigError(DmlsearchError, ValueError):
    """An experiment file (or an override) is invalid; ``problems`` lists every issue."""

    def __init__(self, problems: Sequence[Problem] | str, source: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [Problem("", problems)]
        self.problems: list[Problem] = list(problems)
        self.source = source
        super().__init__(self._format())

    def _format(self) -> str:
        head = f"{self.source}: " if self.source else ""
        if len(self.problems) == 1:
            return head + str(self.problems[0])
        lines = [f"{head}{len(self.problems)} problems"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


Loc = tuple[str | int, ...]


class _Problems:
    """Problems found by our own checks inside a validator, raised as one ValidationError."""

    def __init__(self) -> None:
        self.items: list[tuple[Loc, str, Any]] = []

    def add(self, loc: Loc, message: str, value: Any = None) -> None:
        self.items.append((loc, message, value))

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self, title: str) -> None:
        if not self.items:
            return
        # A ValidationError raised inside a validator keeps these locations, prefixed with
        # where the validator sits, so every problem gets its full field path.
        raise ValidationError.from_exception_data(
            title,
            [
                InitErrorDetails(
                    type=_err(msg),
                    loc=loc,
                    input=_short(value),
                )
                for loc, msg, value in self.items
            ],
        )


def _err(message: str) -> PydanticCustomError:
    """A validation error with our message as is (braces included)."""
    return PydanticCustomError("dmlsearch", "{message}", {"message": message})


def _short(value: Any) -> Any:
    # Inputs are kept in the error only for display; never keep a large structure alive.
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)[:80]


def _suggest(
    word: str, choices: Sequence[str] | set[str] | frozenset[str], what: str = "did you mean"
) -> str:
    """``; did you mean 'x'?`` for the closest choice, or nothing."""
    word = str(word)
    folded = {c.lower(): c for c in choices}
    if word.lower() in folded:  # a case slip
        return f"; {what} {folded[word.lower()]!r}?"
    matches = difflib.get_close_matches(word, sorted(choices), n=3, cutoff=0.6)
    # Among near ties prefer a transposition (SCV -> SVC, not SVR).
    same_letters = [m for m in matches if sorted(m.lower()) == sorted(word.lower())]
    best = same_letters or matches
    return f"; {what} {best[0]!r}?" if best else ""


def _known(choices: Sequence[str], limit: int = 12) -> str:
    items = sorted(choices)
    text = ", ".join(items[:limit])
    return text + (", ..." if len(items) > limit else "")


# -- YAML loading --------------------------------------------------------------------------

# libyaml's parser is ~100x faster than PyYAML's on adversarial input (and never recurses).
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):
    """SafeLoader with the YAML 1.2 core schema: ``1e-3`` is a float, ``yes`` a string.

    PyYAML implements YAML 1.1, where ``lr: 1e-3`` is the *string* "1e-3" (a float needs
    a dot), ``on``/``no`` are booleans, ``010`` is octal and ``1:30`` is 90.
    """

    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {}


_RESOLVERS: list[tuple[str, str, str]] = [
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", "~nN"),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", "<"),
]
for _tag, _regexp, _first in _RESOLVERS:
    _Loader.add_implicit_resolver(_tag, re.compile(_regexp), list(_first))
# The empty scalar is null, as in every YAML schema.
_Loader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^$"), [""])


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)  # "010" is ten, not eight


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = str(loader.construct_scalar(node)).lower()
    if text.endswith(".inf"):
        return -math.inf if text.startswith("-") else math.inf
    if text == ".nan":
        return math.nan
    return float(text)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def _mark_line(mark: Any) -> int | None:
    return None if mark is None else int(mark.line) + 1


def _yaml_problem(exc: yaml.YAMLError) -> Problem:
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if problem:
        context = getattr(exc, "context", None)
        text = f"{problem} ({context})" if context else str(problem)
    else:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return Problem("", f"invalid YAML: {text}", _mark_line(mark))


def _check_events(text: str) -> None:
    """Walk parser events (iteratively) and refuse deep, alias-heavy or huge documents.

    ``yaml.safe_load`` recurses once per nesting level (1,000 levels raise RecursionError)
    and expands aliases by reference (a few lines can stand for 10^9 nodes); both must be
    stopped before the composer or constructor run.
    """
    depth = 0
    aliases = 0
    expanded = 0  # nodes in the document with every alias expanded
    anchors: dict[str, int] = {}
    open_: list[tuple[str | None, int]] = []
    documents = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise ConfigError(
                    [
                        Problem(
                            "",
                            "the file holds several YAML documents (---); keep one experiment per file",
                            _mark_line(event.start_mark),
                        )
                    ]
                )
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            expanded += 1
            if depth > MAX_DEPTH:
                raise ConfigError(
                    [
                        Problem(
                            "",
                            f"nesting deeper than {MAX_DEPTH} levels; an experiment file "
                            "needs a handful",
                            _mark_line(event.start_mark),
                        )
                    ]
                )
            open_.append((event.anchor, expanded))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            anchor, start = open_.pop()
            if anchor is not None:
                anchors[anchor] = expanded - start + 1
        elif isinstance(event, yaml.ScalarEvent):
            expanded += 1
            if event.anchor is not None:
                anchors[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise ConfigError(
                    [
                        Problem(
                            "",
                            f"more than {MAX_ALIASES} aliases (*name); write the values out",
                            _mark_line(event.start_mark),
                        )
                    ]
                )
            expanded += anchors.get(str(event.anchor), 1)
        if expanded > MAX_NODES:
            raise ConfigError(
                [
                    Problem(
                        "",
                        f"the document expands to more than {MAX_NODES:,} values "
                        "(aliases referring to aliases?); write a smaller file",
                        _mark_line(event.start_mark),
                    )
                ]
            )


def _check_duplicates(root: yaml.Node) -> list[Problem]:
    """Duplicate keys: YAML forbids them, PyYAML silently keeps the last one."""
    problems = []
    stack = [root]
    seen_nodes: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # an alias shares its node; check it once
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value != "<<":
                    if key.value in keys:
                        problems.append(
                            Problem(
                                "",
                                f"duplicate key {key.value!r} (first on line {keys[key.value]}); "
                                "keep one",
                                _mark_line(key.start_mark),
                            )
                        )
                    else:
                        keys[key.value] = _mark_line(key.start_mark) or 0
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return problems


def _load_yaml(text: str, source: str | None) -> tuple[Any, yaml.Node | None]:
    """Safe-load one YAML document; returns the data and its node tree (for line numbers)."""
    try:
        _check_events(text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None, None
            problems = _check_duplicates(node)
            if problems:
                raise ConfigError(problems, source)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except ConfigError as exc:
        raise ConfigError(exc.problems, source) from None
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_problem(exc)], source) from None
    except RecursionError:  # pragma: no cover - prevented by the depth cap
        raise ConfigError(
            [Problem("", f"nesting deeper than {MAX_DEPTH} levels")], source
        ) from None
    return data, node


def _parse_value(text: str) -> Any:
    """A ``--set`` value: one YAML value (``3``, ``1e-3``, ``true``, ``[a, b]``, ``''``)."""
    data, _ = _load_yaml(text, None)
    return data


# -- overrides -----------------------------------------------------------------------------


def _apply_override(data: dict[str, Any], expr: str) -> Loc:
    key, sep, raw = expr.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            [Problem("", f"--set {expr!r}: expected key.path=value, e.g. search.n_trials=20")]
        )
    try:
        value = _parse_value(raw)
    except ConfigError as exc:
        raise ConfigError(
            [Problem(key, f"--set value {raw!r} is not a YAML value: {exc.problems[0].message}")]
        ) from None
    parts: list[str | int] = []
    node: Any = data
    names = key.split(".")
    for i, name in enumerate(names):
        last = i == len(names) - 1
        if isinstance(node, list):
            if not name.lstrip("-").isdigit() or not -len(node) <= int(name) < len(node):
                raise ConfigError(
                    [Problem(key, f"--set: {name!r} is not an index of the list at this point")]
                )
            index = int(name) % len(node)
            parts.append(index)
            if last:
                node[index] = value
            else:
                node = node[index]
            continue
        if not isinstance(node, dict):
            where = ".".join(str(p) for p in parts) or "the file"
            raise ConfigError(
                [Problem(key, f"--set: {where} is a {type(node).__name__}, not a mapping")]
            )
        parts.append(name)
        if last:
            node[name] = value
        else:
            child = node.get(name)
            if child is None:
                child = node[name] = {}
            node = child
    return tuple(parts)


def _unshare(data: Any) -> Any:
    # Aliases give shared Python objects; an override must change one place only.
    if isinstance(data, dict):
        return {k: _unshare(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_unshare(v) for v in data]
    return data


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
    class_loc = (*loc, "class") if class_loc is None else class_loc
    before = len(problems.items)
    if not isinstance(spec, dict):
        problems.add(loc, "expected {class: import.path, params: {...}}", spec)
        return None
    for key in spec:
        if key not in _SPEC_KEYS:
            problems.add(
                (*loc, key),
                f"unknown key {key!r}{_suggest(str(key), _SPEC_KEYS)} (an object is "
                "written {class: import.path, params: {...}})",
                key,
            )
    path = spec.get("class")
    raw_params = spec.get("params")
    if raw_params is None:
        raw_params = {}
    if not isinstance(raw_params, dict):
        problems.add((*loc, "params"), "expected a mapping of parameter -> value", raw_params)
        raw_params = {}
    params = {}
    for name, value in raw_params.items():
        if not isinstance(name, str) or not name.isidentifier():
            problems.add((*loc, "params", name), f"parameter names are identifiers, got {name!r}")
            continue
        params[name] = _build_value(value, (*loc, "params", name), problems, base_dir)
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
    name = getattr(cls, "__name__", path)
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        accepted = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        try:
            signature.bind(**params)
        except TypeError as exc:
            unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
            if unexpected:
                bad = unexpected.group(1)
                problems.add(
                    (*loc, "params", bad),
                    f"{name} has no parameter {bad!r}{_suggest(bad, accepted)}",
                    bad,
                )
            else:
                missing = re.search(r"missing a required argument: '(\w+)'", str(exc))
                where = (*loc, "params", missing.group(1)) if missing else (*loc, "params")
                problems.add(where, f"{name}: {exc}")
            return None
    if len(problems.items) > before:
        return None  # a problem in this spec: constructing it would only add noise
    try:
        obj = cls(**params)
    except Exception as exc:
        problems.add((*loc, "params"), f"{name}(...) failed: {type(exc).__name__}: {exc}")
        return None
    # scikit-learn checks parameter values only in fit; its declared constraints let us
    # report `C: -1` now, with the parameter's path.
    if hasattr(obj, "_parameter_constraints") and hasattr(obj, "_validate_params"):
        try:
            obj._validate_params()
        except (ValueError, TypeError) as exc:
            found = re.search(r"The '(\w+)' parameter", str(exc))
            where = (*loc, "params", found.group(1)) if found else (*loc, "params")
            problems.add(where, str(exc))
            return None
    return obj


# -- field types ---------------------------------------------------------------------------


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise _err(f"expected a number, got {value}")
    return value


_SECONDS = re.compile(
    r"^\s*(?:(\d+(?:\.\d*)?)\s*h)?\s*(?:(\d+(?:\.\d*)?)\s*m)?\s*(?:(\d+(?:\.\d*)?)\s*s?)?\s*$"
)


def _seconds(value: Any) -> Any:
    """Seconds as a number, or a duration such as ``90s``, ``10m``, ``1h30m``."""
    if isinstance(value, bool):
        raise _err(f"expected seconds (e.g. 600 or 10m), got {value}")
    if isinstance(value, str):
        match = _SECONDS.match(value)
        if not value.strip() or not match or not any(match.groups()):
            raise _err(f"expected seconds or a duration such as 90s, 10m or 1h30m, got {value!r}")
        h, m, s = (float(g) if g else 0.0 for g in match.groups())
        value = h * 3600 + m * 60 + s
    if not isinstance(value, numbers.Real) or not math.isfinite(float(value)) or value <= 0:
        raise _err(f"expected a number of seconds > 0, got {value!r}")
    return float(value)


PosInt = Annotated[int, BeforeValidator(_no_bool), Field(gt=0)]
NonNegInt = Annotated[int, BeforeValidator(_no_bool), Field(ge=0)]
Seconds = Annotated[float, BeforeValidator(_seconds)]
Text = Annotated[str, Field(min_length=1)]


class _Section(BaseModel):
    """Every section refuses unknown keys (a misspelt key must not be silently ignored)."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, strict=False, arbitrary_types_allowed=True
    )


# -- data ----------------------------------------------------------------------------------

_NOT_XY = {
    "load_files",
    "load_sample_image",
    "load_sample_images",
    "load_svmlight_file",
    "load_svmlight_files",
}


@functools.lru_cache(maxsize=1)
def _sklearn_datasets() -> dict[str, Any]:
    import sklearn.datasets

    return {
        name: getattr(sklearn.datasets, name)
        for name in dir(sklearn.datasets)
        if name.startswith(("load_", "make_")) and name not in _NOT_XY
    }


_FORMATS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".parquet": "parquet", ".pq": "parquet"}
_COMPRESSIONS = (".gz", ".bz2", ".zip", ".xz", ".zst")


def _infer_format(path: str) -> str | None:
    name = path.lower()
    for suffix in _COMPRESSIONS:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return _FORMATS.get(os.path.splitext(name)[1])


class DataSection(_Section):
    """Where ``(X, y)`` comes from: exactly one of ``dataset``, ``path`` or ``loader``."""

    dataset: str | None = None
    path: str | None = None
    target: str | None = None
    features: list[str] | None = None
    format: Literal["csv", "parquet"] | None = None
    read_kwargs: dict[str, Any] = Field(default_factory=dict)
    loader: str | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> DataSection:
        problems = _Problems()
        base_dir = _base_dir(info)
        given = [k for k in ("dataset", "path", "loader") if getattr(self, k) is not None]
        if len(given) != 1:
            loc: Loc = (given[1],) if len(given) > 1 else ()
            problems.add(
                loc,
                "give exactly one of dataset (e.g. sklearn:load_digits), path (a CSV or "
                f"Parquet file, with target) or loader (module:function); got {given or 'none'}",
            )
            problems.raise_if_any("DataSection")
        if self.features is not None and not self.features:
            problems.add(("features",), "an empty list; leave it out to use every other column")
        if self.path is None:
            for key in ("target", "format", "features"):
                if getattr(self, key) is not None:
                    problems.add((key,), "only used with data.path")
            if self.read_kwargs:
                problems.add(("read_kwargs",), "only used with data.path")
        elif self.kwargs:
            problems.add(("kwargs",), "used with dataset or loader; use read_kwargs for a file")
        if self.dataset is not None:
            self._check_dataset(problems)
        elif self.path is not None:
            self._check_path(problems, base_dir)
        elif self.loader is not None:
            self._check_function(self.loader, ("loader",), problems, base_dir)
        problems.raise_if_any("DataSection")
        return self

    def _check_dataset(self, problems: _Problems) -> None:
        assert self.dataset is not None
        prefix, sep, name = self.dataset.rpartition(":")
        if sep and prefix != "sklearn":
            problems.add(
                ("dataset",),
                f"datasets come from scikit-learn (sklearn:{name}); for other data use "
                "path (a file) or loader (module:function)",
                self.dataset,
            )
            return
        funcs = _sklearn_datasets()
        if name not in funcs:
            problems.add(
                ("dataset",),
                f"scikit-learn has no dataset {name!r}{_suggest(name, list(funcs))} "
                "(load_* and make_* functions of sklearn.datasets)",
                self.dataset,
            )
            return
        _check_kwargs(funcs[name], self.kwargs, problems)

    def _check_path(self, problems: _Problems, base_dir: Path | None) -> None:
        assert self.path is not None
        if self.target is None:
            problems.add(("target",), "required with data.path: the name of the label column")
        fmt = self.format or _infer_format(self.path)
        if fmt is None:
            problems.add(
                ("format",),
                f"cannot tell the format of {self.path!r} from its suffix; set format: csv "
                "or format: parquet",
            )
        if "://" in self.path:
            return  # a remote file (s3://, gs://): checked when read
        resolved = _resolve(self.path, base_dir)
        if not resolved.is_file():
            where = f" (relative paths resolve against {base_dir})" if base_dir else ""
            problems.add(("path",), f"no such file: {resolved}{where}", self.path)
            return
        self.path = str(resolved)
        if fmt == "csv" and self.target is not None:
            columns = _csv_columns(resolved, self.read_kwargs, problems)
            if columns is not None and self.target not in columns:
                problems.add(
                    ("target",),
                    f"{resolved.name} has no column {self.target!r}"
                    f"{_suggest(self.target, columns)} (columns: {_known(columns)})",
                    self.target,
                )
            for i, name in enumerate(self.features or []):
                if columns is not None and name not in columns:
                    problems.add(
                        ("features", i),
                        f"{resolved.name} has no column {name!r}"
                        f"{_suggest(name, columns)} (columns: {_known(columns)})",
                        name,
                    )
                elif name == self.target:
                    problems.add(("features", i), f"{name!r} is the target column", name)

    def _check_function(
        self, path: str, loc: Loc, problems: _Problems, base_dir: Path | None
    ) -> None:
        try:
            func = _import(path, base_dir)
        except _ImportFailed as exc:
            where = (
                f" (modules next to the experiment file, in {base_dir}, import too)"
                if base_dir
                else ""
            )
            problems.add(loc, f"{exc}{where}", path)
            return
        if not callable(func):
            problems.add(loc, f"{path} is not a function returning (X, y)", path)
            return
        _check_kwargs(func, self.kwargs, problems)


def _check_kwargs(func: Any, kwargs: dict[str, Any], problems: _Problems) -> None:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        names = [p.name for p in signature.parameters.values()]
        bad = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if bad:
            problems.add(
                ("kwargs", bad.group(1)),
                f"{func.__name__} has no parameter {bad.group(1)!r}{_suggest(bad.group(1), names)}",
            )
        else:
            problems.add(("kwargs",), f"{func.__name__}: {exc}")


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    return p.resolve()


def _csv_columns(path: Path, read_kwargs: dict[str, Any], problems: _Problems) -> list[str] | None:
    import pandas as pd

    kwargs = dict(read_kwargs)
    kwargs["nrows"] = 0
    if path.name.lower().endswith((".tsv", ".tsv.gz")):
        kwargs.setdefault("sep", "\t")
    try:
        return [str(c) for c in pd.read_csv(path, **kwargs).columns]
    except Exception as exc:
        problems.add(("path",), f"cannot read {path.name}: {type(exc).__name__}: {exc}")
        return None


# -- model ---------------------------------------------------------------------------------


def _model_shorthand(value: Any) -> Any:
    return {"class": value} if isinstance(value, str) else value


class ModelSection(_Section):
    """The estimator: ``class`` + ``params``, or ``steps`` for a Pipeline.

    Any mapping ``{class: ..., params: ...}`` inside ``params`` (or a step) is built as an
    object too, so ColumnTransformers, ensembles and nested Pipelines can be written out.
    """

    cls: str | None = Field(None, alias="class")
    params: dict[str, Any] = Field(default_factory=dict)
    steps: dict[str, Any] | None = None
    _estimator: Any = PrivateAttr(None)

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> ModelSection:
        problems = _Problems()
        self._estimator = _build_model(self, problems, _base_dir(info))
        problems.raise_if_any("ModelSection")
        return self


def _build_model(section: ModelSection, problems: _Problems, base_dir: Path | None) -> Any:
    if section.steps is None:
        if section.cls is None:
            problems.add(
                (), "give class (an estimator such as sklearn.svm.SVC) or steps (a Pipeline)"
            )
            return None
        return _build_spec(
            {"class": section.cls, "params": section.params}, (), problems, base_dir, estimator=True
        )
    if not section.steps:
        problems.add(("steps",), "a Pipeline needs at least one step")
        return None
    if "steps" in section.params:
        problems.add(("params", "steps"), "give the steps under model.steps")
        return None
    steps: list[tuple[str, Any]] = []
    for name, spec in section.steps.items():
        loc: Loc = ("steps", name)
        if not isinstance(name, str) or not name or "__" in name:
            problems.add(loc, f"step names are non-empty strings without '__', got {name!r}")
            continue
        if spec is None or spec == "passthrough":
            steps.append((name, spec))
            continue
        if isinstance(spec, str):
            built = _build_spec(
                {"class": spec}, loc, problems, base_dir, estimator=True, class_loc=loc
            )
        else:
            built = _build_spec(spec, loc, problems, base_dir, estimator=True)
        steps.append((name, built))
    if problems:
        return None
    return _build_pipeline(section, steps, problems, base_dir)


def _build_pipeline(
    section: ModelSection, steps: list[tuple[str, Any]], problems: _Problems, base_dir: Path | None
) -> Any:
    path = section.cls or "sklearn.pipeline.Pipeline"
    try:
        cls = _import(path, base_dir)
    except _ImportFailed as exc:
        problems.add(("class",), str(exc), path)
        return None
    params = {
        k: _build_value(v, ("params", k), problems, base_dir) for k, v in section.params.items()
    }
    if problems:
        return None
    try:
        return cls(steps=steps, **params)
    except TypeError as exc:
        bad = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        loc: Loc = ("params", bad.group(1)) if bad else ("params",)
        problems.add(loc, f"{getattr(cls, '__name__', path)}: {exc}")
    except Exception as exc:
        problems.add(("steps",), f"{type(exc).__name__}: {exc}")
    return None


# -- search space --------------------------------------------------------------------------

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
    from .exceptions import SearchSpaceError
    from .space import Categorical, Float, Int

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
    if kind not in _DIM_KEYS:
        if "type" not in value:
            problems.add(loc, "missing type: float, int or categorical (or give a list of choices)")
        else:
            hint = _suggest(str(kind), list(_DIM_KEYS)) if isinstance(kind, str) else ""
            problems.add(
                (*loc, "type"), f"unknown type {kind!r}; use float, int or categorical{hint}", kind
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


# -- search --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _scorer_names() -> frozenset[str]:
    from sklearn.metrics import get_scorer_names

    return frozenset(get_scorer_names())


class SearchSection(_Section):
    """What to try and how to score it; each field maps to a ``SearchCV`` argument."""

    space: Any
    strategy: Literal["random", "grid", "tpe", "cmaes", "gp", "nsga2"] = "random"
    n_trials: PosInt | None = None
    time_budget: Seconds | None = None
    cv: Any = 5
    scoring: Any = None
    refit: Any = True
    error_score: Any = math.nan
    return_train_score: StrictBool = False
    random_state: NonNegInt | None = None
    max_concurrent_trials: PosInt | None = None
    trial_timeout: Seconds | None = None
    max_retries: NonNegInt = 2

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() != value and value.lower() in STRATEGY_NAMES:
            return value.lower()
        if isinstance(value, str) and value not in STRATEGY_NAMES:
            raise _err(
                f"unknown strategy {value!r}; choose one of {', '.join(STRATEGY_NAMES)}"
                f"{_suggest(value, STRATEGY_NAMES)}"
            )
        return value

    @field_validator("space", mode="after")
    @classmethod
    def _space(cls, value: Any, info: ValidationInfo) -> Any:
        problems = _Problems()
        space = _parse_space(value, problems, _base_dir(info))
        problems.raise_if_any("space")
        return space

    @field_validator("cv", mode="after")
    @classmethod
    def _cv(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 2:
                raise _err(f"cv needs at least 2 folds, got {value}")
            return value
        if _is_spec(value):
            problems = _Problems()
            splitter = _build_spec(value, (), problems, _base_dir(info))
            if not problems and not hasattr(splitter, "split"):
                problems.add(
                    ("class",), f"{value['class']} is not a CV splitter (it has no split method)"
                )
            problems.raise_if_any("cv")
            return value
        raise _err(
            f"expected a number of folds (>= 2) or a splitter {{class: sklearn.model_selection.KFold, params: {{...}}}}, got {_short(value)!r}"
        )

    @field_validator("scoring", mode="after")
    @classmethod
    def _scoring(cls, value: Any) -> Any:
        if value is None:
            return None
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise _err(
                f"expected a scorer name (e.g. accuracy) or a list of names, got {_short(value)!r}"
            )
        if len(set(names)) != len(names):
            raise _err("scorer names must be unique")
        known = _scorer_names()
        problems = _Problems()
        for i, name in enumerate(names):
            if name not in known:
                loc: Loc = () if isinstance(value, str) else (i,)
                problems.add(
                    loc,
                    f"unknown scorer {name!r}{_suggest(name, known)} (see "
                    "sklearn.metrics.get_scorer_names())",
                    name,
                )
        problems.raise_if_any("scoring")
        return value

    @field_validator("refit", mode="after")
    @classmethod
    def _refit(cls, value: Any) -> Any:
        if not isinstance(value, (bool, str)) or value == "":
            raise _err(f"expected true, false or a scorer name, got {_short(value)!r}")
        return value

    @field_validator("error_score", mode="after")
    @classmethod
    def _error_score(cls, value: Any) -> Any:
        if value == "raise":
            return value
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        if value is None:
            return math.nan
        raise _err(f"expected raise or a number (default .nan), got {_short(value)!r}")

    @model_validator(mode="after")
    def _check(self) -> SearchSection:
        problems = _Problems()
        if isinstance(self.scoring, list) and not (
            self.refit is False or (isinstance(self.refit, str) and self.refit in self.scoring)
        ):
            problems.add(
                ("refit",),
                f"with several scorers, refit names the one to pick the best by (one of "
                f"{self.scoring}) or is false; got {self.refit!r}",
            )
        if self.strategy == "grid":
            for loc, dim in _dimensions(self.space):
                if not dim.is_finite:
                    problems.add(
                        ("space", *loc),
                        "strategy grid needs finite dimensions: give a list of values, or use "
                        "strategy random or tpe",
                    )
        if self.strategy == "gp":
            import importlib.util

            if importlib.util.find_spec("torch") is None:
                problems.add(
                    ("strategy",), "strategy gp runs on torch: pip install dmlsearch[torch]"
                )
        problems.raise_if_any("SearchSection")
        return self


def _dimensions(space: Any) -> Iterator[tuple[Loc, Any]]:
    if isinstance(space, dict):
        for name, dim in space.items():
            yield (name,), dim
    elif isinstance(space, list):
        for i, sub in enumerate(space):
            for name, dim in sub.items():
                yield (i, name), dim


# -- cluster and registry ------------------------------------------------------------------


def _memory_limit(value: Any) -> Any:
    if value is None or value == "auto":
        return value
    if isinstance(value, bool):
        raise _err("expected bytes (e.g. 4GiB), auto or a fraction")
    if isinstance(value, (int, float)) and value >= 0:
        return value
    if isinstance(value, str):
        from dask.utils import parse_bytes

        try:
            parse_bytes(value)
        except (ValueError, TypeError):
            raise _err(f"expected a size such as 4GiB or 500MB, got {value!r}") from None
        return value
    raise _err(f"expected a size such as 4GiB, got {_short(value)!r}")


class LocalClusterSection(_Section):
    """A LocalCluster of worker processes on this machine, started for the run."""

    n_workers: PosInt | None = None
    threads_per_worker: PosInt = 1
    memory_limit: Annotated[Any, BeforeValidator(_memory_limit)] = None


class AdaptSection(_Section):
    """``cluster.adapt(minimum=..., maximum=...)`` for a cluster class that can adapt."""

    minimum: NonNegInt = 0
    maximum: PosInt

    @model_validator(mode="after")
    def _check(self) -> AdaptSection:
        if self.minimum > self.maximum:
            raise _err(f"minimum ({self.minimum}) is greater than maximum ({self.maximum})")
        return self


_ADDRESS = re.compile(
    r"^(?:(?:tcp|tls|ucx|ws|wss|inproc)://)?[^\s/:]+(?::\d{1,5})?/?$|^inproc://\S+$"
)


class ClusterSection(_Section):
    """Where trials run: one of ``local``, ``address`` or ``class``.

    Leave the whole section out for the embedded default (a LocalCluster sized to the
    machine, started and closed by the search).
    """

    local: LocalClusterSection | None = None
    address: str | None = None
    cls: str | None = Field(None, alias="class")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    scale: PosInt | None = None
    adapt: AdaptSection | None = None
    connect_timeout: Seconds = 30.0

    @field_validator("address", mode="after")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not _ADDRESS.match(value.strip()):
            raise _err(f"expected a scheduler address such as tcp://10.0.0.5:8786, got {value!r}")
        return None if value is None else value.strip()

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> ClusterSection:
        problems = _Problems()
        given = [
            k
            for k, v in (("local", self.local), ("address", self.address), ("class", self.cls))
            if v is not None
        ]
        if len(given) != 1:
            problems.add(
                (given[1],) if len(given) > 1 else (),
                "give exactly one of local (a LocalCluster), address (a running scheduler) or "
                f"class (e.g. dask_jobqueue.SLURMCluster); got {given or 'none'}. Leave the "
                "section out for the embedded default",
            )
        if self.cls is None:
            for key in ("kwargs", "scale", "adapt"):
                if getattr(self, key):
                    problems.add((key,), "only used with cluster.class")
        else:
            if self.scale is not None and self.adapt is not None:
                problems.add(("adapt",), "give scale or adapt, not both")
            try:
                cls = _import(self.cls, _base_dir(info))
            except _ImportFailed as exc:
                problems.add(("class",), str(exc), self.cls)
            else:
                if not callable(cls):
                    problems.add(("class",), f"{self.cls} is not a cluster class", self.cls)
                else:
                    _check_kwargs(cls, self.kwargs, problems)
        problems.raise_if_any("ClusterSection")
        return self


class RegistrySection(_Section):
    """Where experiments and models are recorded.

    ``url``: a SQLAlchemy database URL (default ``$DMLSEARCH_REGISTRY``, else
    ``sqlite:///./dmlsearch.db`` in the working directory); ``artifacts``: a folder or
    fsspec URL for model files (default beside a SQLite database).
    """

    url: str | None = None
    artifacts: str | None = None

    @field_validator("url", mode="after")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(value)
        except (ArgumentError, ValueError):
            raise _err(
                f"not a database URL: {value!r} (e.g. sqlite:///dmlsearch.db or postgresql+psycopg://user@host/db)"
            ) from None
        return value


# -- root ----------------------------------------------------------------------------------


def _experiment_name(value: Any) -> Any:
    if isinstance(value, str):
        value = value.strip()
        if not value or len(value) > 200 or not value.isprintable():
            raise _err(f"expected a printable name of 1 to 200 characters, got {value!r}")
    return value


class ExperimentConfig(_Section):
    """An experiment file, schema version 1.

    New capabilities arrive as new optional sections (see docs/config.md), so a version-1
    file stays valid; ``version`` changes only when an existing field changes meaning.
    """

    version: Literal[1]
    name: Annotated[str, BeforeValidator(_experiment_name)]
    description: str | None = None
    data: DataSection
    model: Annotated[ModelSection, BeforeValidator(_model_shorthand)]
    search: SearchSection
    cluster: ClusterSection | None = None
    registry: RegistrySection = Field(default_factory=RegistrySection)

    @model_validator(mode="after")
    def _check(self) -> ExperimentConfig:
        estimator = self.model._estimator
        if estimator is None:
            return self
        problems = _Problems()
        valid = set(estimator.get_params(deep=True))
        for loc, _dim in _dimensions(self.search.space):
            name = str(loc[-1])
            if name in valid or _valid_under_choice(name, self.search.space, loc):
                continue
            hint = _suggest(name, valid)
            if not hint:
                hint = f" (parameters: {_known(list(valid))})"
            problems.add(
                ("search", "space", *loc),
                f"{type(estimator).__name__} has no parameter {name!r}{hint}",
                name,
            )
        problems.raise_if_any("ExperimentConfig")
        return self


def _valid_under_choice(name: str, space: Any, loc: Loc) -> bool:
    """``clf__C`` is valid when ``clf`` is itself searched over estimators that have ``C``."""
    sub = space if isinstance(space, dict) else space[int(loc[0])]
    prefix, _, rest = name.rpartition("__")
    while prefix:
        dim = sub.get(prefix)
        choices = getattr(dim, "choices", None)
        if choices is not None:
            return any(
                hasattr(c, "get_params") and rest in c.get_params(deep=True) for c in choices
            )
        head, _, tail = prefix.rpartition("__")
        prefix, rest = head, f"{tail}__{rest}"
    return False


# -- error locations -----------------------------------------------------------------------


def _format_path(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _node_at(root: yaml.Node | None, loc: Loc, *, key: bool = False) -> yaml.Node | None:
    """The deepest node of the YAML tree along ``loc`` (the key node itself if ``key``)."""
    node = root
    found = root
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for k, v in _mapping_pairs(node):
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    child = k if (last and key) else v
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            child = node.value[part]
        if child is None:
            return found
        node = found = child
    return found


def _mapping_pairs(node: yaml.MappingNode) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == "<<":
            merged = v.value if isinstance(v, yaml.SequenceNode) else [v]
            for m in merged:
                if isinstance(m, yaml.MappingNode):
                    yield from _mapping_pairs(m)
        else:
            yield k, v


def _valid_keys(loc: Loc) -> list[str] | None:
    """The keys the schema accepts at ``loc`` (for "did you mean")."""
    model: Any = ExperimentConfig
    for part in loc:
        field = None
        for name, info in model.model_fields.items():
            if part in (name, info.alias):
                field = info
                break
        if field is None:
            return None
        model = _model_of(field.annotation)
        if model is None:
            return None
    return [info.alias or name for name, info in model.model_fields.items()]


def _model_of(annotation: Any) -> Any:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _message(err: Any) -> str:
    kind = err["type"]
    loc = tuple(err["loc"])
    if kind == "extra_forbidden":
        name = str(loc[-1]) if loc else "?"
        keys = _valid_keys(loc[:-1]) or []
        hint = _suggest(name, keys)
        if not hint and keys:
            hint = f" (keys here: {', '.join(keys)})"
        return f"unknown key {name!r}{hint}"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "literal_error" and loc == ("version",):
        return f"this dmlsearch reads version {SCHEMA_VERSION}"
    value = err.get("input")
    if kind != "dmlsearch" and isinstance(value, (str, int, float)):
        msg += f", got {value!r}"
    return msg


def _problems_from(
    exc: ValidationError, root: yaml.Node | None, overrides: dict[Loc, str], data: Any
) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _format_path(loc)
        message = _message(err)
        if (path, message) in seen:
            continue
        seen.add((path, message))
        origin = next((expr for o, expr in overrides.items() if loc[: len(o)] == o), None)
        if origin is not None:
            problems.append(Problem(path, f"{message} (from --set {origin})"))
            continue
        node = _node_at(root, loc, key=err["type"] == "extra_forbidden")
        line = _mark_line(node.start_mark) if node is not None else None
        problems.append(Problem(path, message, line))
    # Top to bottom, as the file reads; problems without a line (from --set) last.
    problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return problems


# -- loading -------------------------------------------------------------------------------


def parse_config(
    text: str,
    *,
    overrides: Sequence[str] = (),
    base_dir: str | os.PathLike[str] | None = None,
    source: str | None = None,
) -> ExperimentConfig:
    """Validate the YAML ``text`` of an experiment file.

    ``base_dir`` is where relative data paths and loader modules are looked up (the file's
    folder for :func:`load_config`; the working directory if None). Raises ConfigError.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise ConfigError(
            [
                Problem(
                    "", f"larger than {MAX_FILE_BYTES // 1024} KiB; an experiment file is a few KiB"
                )
            ],
            source,
        )
    data, root = _load_yaml(text, source)
    if data is None and root is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                Problem(
                    "",
                    f"expected a mapping of sections (version, name, data, model, search, ...), "
                    f"got a {type(data).__name__}",
                    _mark_line(root.start_mark) if root is not None else None,
                )
            ],
            source,
        )
    data = _unshare(data)
    applied: dict[Loc, str] = {}
    for expr in overrides:
        try:
            applied[_apply_override(data, expr)] = expr
        except ConfigError as exc:
            raise ConfigError(exc.problems, source) from None
    version = data.get("version")
    if "version" not in data:
        raise ConfigError(
            [Problem("version", f"required: start the file with `version: {SCHEMA_VERSION}`", 1)],
            source,
        )
    if version != SCHEMA_VERSION or isinstance(version, bool):
        node = _node_at(root, ("version",))
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            text_ = (
                f"the file follows schema version {version}; this dmlsearch reads version "
                f"{SCHEMA_VERSION}: upgrade dmlsearch"
            )
        else:
            text_ = f"expected {SCHEMA_VERSION}, got {version!r}"
        line = (
            None
            if ("version",) in applied
            else (_mark_line(node.start_mark) if node is not None else None)
        )
        raise ConfigError([Problem("version", text_, line)], source)
    folder = Path(base_dir).resolve() if base_dir is not None else Path.cwd()
    try:
        return ExperimentConfig.model_validate(data, context={"base_dir": folder})
    except ValidationError as exc:
        raise ConfigError(_problems_from(exc, root, applied, data), source) from None


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read and validate an experiment file; ``overrides`` are ``key.path=value`` strings.

    Relative data paths and loader modules resolve against the file's folder.
    Raises :class:`ConfigError` listing every problem with its field path and line.
    """
    file = Path(path)
    source = str(path)
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(
                [
                    Problem(
                        "",
                        f"{size:,} bytes, larger than {MAX_FILE_BYTES // 1024} KiB; an experiment file is a few KiB",
                    )
                ],
                source,
            )
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError([Problem("", "no such file")], source) from None
    except IsADirectoryError:
        raise ConfigError([Problem("", "is a folder, not an experiment file")], source) from None
    except OSError as exc:
        raise ConfigError([Problem("", f"cannot read: {exc.strerror or exc}")], source) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [Problem("", f"not UTF-8 text (byte {exc.start}); save the file as UTF-8")], source
        ) from None
    return parse_config(text, overrides=overrides, base_dir=file.resolve().parent, source=source)


# -- builders ------------------------------------------------------------------------------


def _build_checked(build: Any) -> Any:
    problems = _Problems()
    obj = build(problems)
    if problems:
        raise ConfigError([Problem(_format_path(loc), msg) for loc, msg, _ in problems.items])
    return obj


def build_model(cfg: ExperimentConfig) -> Any:
    """A fresh, unfitted estimator as ``model`` describes it."""
    return _build_checked(lambda problems: _build_model(cfg.model, problems, None))


def build_cv(cfg: ExperimentConfig) -> Any:
    """``search.cv``: a number of folds, or a fresh splitter."""
    cv = cfg.search.cv
    if isinstance(cv, int):
        return cv
    return _build_checked(lambda problems: _build_spec(cv, ("search", "cv"), problems, None))


def load_data(cfg: ExperimentConfig) -> tuple[Any, Any]:
    """``(X, y)`` as ``data`` says: a scikit-learn dataset, a CSV/Parquet file or a loader."""
    data = cfg.data
    if data.dataset is not None:
        name = data.dataset.rpartition(":")[2]
        func = _sklearn_datasets()[name]
        if name.startswith("load_"):
            X, y = func(return_X_y=True, **data.kwargs)
        else:
            out = func(**data.kwargs)
            X, y = out[0], out[1]
        return X, y
    if data.path is not None:
        return _read_table(data)
    assert data.loader is not None
    func = _import(data.loader, None)
    out = func(**data.kwargs)
    if not isinstance(out, tuple) or len(out) != 2:
        raise ConfigError(
            [
                Problem(
                    "data.loader",
                    f"{data.loader} must return a tuple (X, y), got {type(out).__name__}",
                )
            ]
        )
    return out


def _read_table(data: DataSection) -> tuple[Any, Any]:
    import pandas as pd

    assert data.path is not None and data.target is not None
    fmt = data.format or _infer_format(data.path)
    kwargs = dict(data.read_kwargs)
    try:
        if fmt == "parquet":
            frame = pd.read_parquet(data.path, **kwargs)
        else:
            if data.path.lower().endswith((".tsv", ".tsv.gz")):
                kwargs.setdefault("sep", "\t")
            frame = pd.read_csv(data.path, **kwargs)
    except FileNotFoundError:
        raise ConfigError([Problem("data.path", f"no such file: {data.path}")]) from None
    except ImportError as exc:
        raise ConfigError(
            [Problem("data.format", f"reading {fmt} needs an extra package: {exc}")]
        ) from None
    except Exception as exc:
        raise ConfigError(
            [Problem("data.path", f"cannot read {data.path}: {type(exc).__name__}: {exc}")]
        ) from None
    if data.target not in frame.columns:
        columns = [str(c) for c in frame.columns]
        raise ConfigError(
            [
                Problem(
                    "data.target",
                    f"no column {data.target!r}{_suggest(data.target, columns)} "
                    f"(columns: {_known(columns)})",
                )
            ]
        )
    if data.features is not None:
        missing = [c for c in data.features if c not in frame.columns]
        if missing:
            raise ConfigError(
                [Problem("data.features", f"no column(s) {missing} in {data.path}")]
            )
        return frame[list(data.features)], frame[data.target]
    return frame.drop(columns=[data.target]), frame[data.target]


def make_registry(cfg: ExperimentConfig, url: str | None = None) -> Registry:
    """The registry ``registry`` names (``url`` overrides it); close it when done."""
    from .registry import Registry

    return Registry(url or cfg.registry.url, cfg.registry.artifacts)


@contextmanager
def open_client(cfg: ExperimentConfig) -> Iterator[Client | None]:
    """A client on the cluster ``cluster`` describes, closed (with what it started) on exit.

    Yields None when the file has no ``cluster`` section: the search then starts its
    embedded LocalCluster. An unreachable address raises ConfigError.
    """
    section = cfg.cluster
    if section is None:
        yield None
        return
    from distributed import Client

    if section.address is not None:
        timeout = section.connect_timeout
        try:
            client = Client(section.address, set_as_default=False, timeout=f"{timeout}s")
        except (OSError, TimeoutError) as exc:
            raise ConfigError(
                [
                    Problem(
                        "cluster.address",
                        f"cannot reach a Dask scheduler at {section.address} within {timeout:g}s "
                        f"({type(exc).__name__}); start one with `dask scheduler` or fix the address",
                    )
                ]
            ) from None
        try:
            yield client
        finally:
            client.close()
        return
    cluster: Any
    if section.local is not None:
        cluster = _start_local(section.local)
    else:
        assert section.cls is not None
        cls = _import(section.cls, None)
        cluster = cls(**section.kwargs)
        try:
            if section.scale is not None:
                cluster.scale(section.scale)
            elif section.adapt is not None:
                cluster.adapt(minimum=section.adapt.minimum, maximum=section.adapt.maximum)
        except BaseException:
            cluster.close()
            raise
    try:
        client = Client(cluster, set_as_default=False)
    except BaseException:
        cluster.close()
        raise
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def _start_local(local: LocalClusterSection) -> Any:
    from .runner import start_local_cluster

    extra = {} if local.memory_limit is None else {"memory_limit": local.memory_limit}
    return start_local_cluster(local.n_workers, local.threads_per_worker, **extra)


def build_search(
    cfg: ExperimentConfig,
    *,
    client: Any = None,
    registry: Any = None,
    progress: bool | None = None,
    resume: bool = False,
) -> SearchCV:
    """A ``SearchCV`` as ``model`` and ``search`` describe, recording as experiment ``name``.

    ``client``: what :func:`open_client` yielded (None: the embedded default). ``registry``:
    a Registry (default: :func:`make_registry`, closed by the caller via
    ``search.registry.close()``).
    """
    from .search import SearchCV

    s = cfg.search
    return SearchCV(
        build_model(cfg),
        s.space,
        strategy=s.strategy,
        n_trials=s.n_trials,
        cv=build_cv(cfg),
        scoring=s.scoring,
        refit=s.refit,
        error_score=s.error_score,
        return_train_score=s.return_train_score,
        random_state=s.random_state,
        client=client,
        max_concurrent_trials=s.max_concurrent_trials,
        trial_timeout=s.trial_timeout,
        time_budget=s.time_budget,
        max_retries=s.max_retries,
        progress=progress,
        registry=registry if registry is not None else make_registry(cfg),
        experiment_name=cfg.name,
        resume=resume,
    )


def run_experiment(
    cfg: ExperimentConfig,
    *,
    resume: bool = False,
    progress: bool | None = None,
    registry_url: str | None = None,
) -> SearchCV:
    """Load the data, open the cluster and the registry, run the search; returns it fitted.

    A new run refuses an experiment name the registry already holds (``resume=True``
    continues it instead), before any cluster is started.
    """
    from .registry import NotFoundError

    with make_registry(cfg, registry_url) as registry:
        if not resume:
            try:
                registry.experiment(cfg.name)
            except NotFoundError:
                pass
            else:
                raise ConfigError(
                    [
                        Problem(
                            "name",
                            f"experiment {cfg.name!r} already exists in {registry.url}; "
                            "`dmlsearch resume` continues it, or pick another name "
                            "(--set name=...)",
                        )
                    ]
                )
        X, y = load_data(cfg)
        with open_client(cfg) as client:
            search = build_search(
                cfg, client=client, registry=registry, progress=progress, resume=resume
            )
            search.fit(X, y)
    return search


def summary(cfg: ExperimentConfig) -> dict[str, Any]:
    """A JSON-friendly outline of a validated file (what ``dmlsearch validate`` prints)."""
    data = cfg.data
    source = data.dataset or data.path or data.loader
    cluster: dict[str, Any]
    c = cfg.cluster
    if c is None:
        cluster = {"kind": "embedded"}
    elif c.address is not None:
        cluster = {"kind": "address", "address": c.address}
    elif c.local is not None:
        cluster = {"kind": "local", **c.local.model_dump()}
    else:
        cluster = {"kind": "class", "class": c.cls, "scale": c.scale}
    model = cfg.model
    names = sorted({str(loc[-1]) for loc, _ in _dimensions(cfg.search.space)})
    return {
        "version": cfg.version,
        "name": cfg.name,
        "data": source,
        "model": model.cls or "sklearn.pipeline.Pipeline",
        "steps": list(model.steps) if model.steps is not None else None,
        "parameters": names,
        "strategy": cfg.search.strategy,
        "n_trials": cfg.search.n_trials,
        "time_budget": cfg.search.time_budget,
        "cv": cfg.search.cv if isinstance(cfg.search.cv, int) else cfg.search.cv.get("class"),
        "scoring": cfg.search.scoring,
        "cluster": cluster,
        "registry": cfg.registry.url,
    }


# -- starter file --------------------------------------------------------------------------

#: What ``dmlsearch init`` writes: a complete, commented experiment that validates and runs.
STARTER = """\
# A dmlsearch experiment. Check it with `dmlsearch validate FILE`, run it with
# `dmlsearch run FILE`; any value can be overridden: --set search.n_trials=50.
# Every section is described in docs/config.md.
version: 1                     # the schema this file follows
name: digits-svc               # the experiment's name in the registry (unique)

data:
  dataset: sklearn:load_digits # or: path: train.csv + target: label
                               # or: loader: my_module:load (returns X, y)

model:                         # a Pipeline, one step per line (file order)
  steps:
    scale: sklearn.preprocessing.StandardScaler
    clf:
      class: sklearn.svm.SVC
      params: {kernel: rbf}

search:
  space:                       # <step>__<parameter> for a Pipeline
    clf__C: {type: float, low: 1e-2, high: 1e3, log: true}
    clf__gamma: {type: float, low: 1e-4, high: 1e-1, log: true}
  strategy: tpe                # random, grid, tpe, cmaes, gp or nsga2
  n_trials: 30
  time_budget: 10m             # no new trial starts after 10 minutes
  cv: 3
  scoring: accuracy
  random_state: 0

# No cluster section: a LocalCluster on this machine is started for the run. Else e.g.
# cluster:
#   address: tcp://scheduler:8786
# No registry section: $DMLSEARCH_REGISTRY, else ./dmlsearch.db. Else e.g.
# registry:
#   url: sqlite:///experiments.db
"""
