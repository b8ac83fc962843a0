"""YAML loading with caps checked on parser events, and --set overrides."""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import yaml

from ._common import MAX_ALIASES, MAX_DEPTH, MAX_NODES, ConfigError, Loc, Problem

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


def _yaml_problem(exc: yaml.YAMLError, text: str = "") -> Problem:
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None and _tab_indented(text, mark.line):
        # libyaml's words for a tab in the indentation ("found character that cannot start
        # any token") do not say that the character is a tab.
        return Problem(
            "",
            "invalid YAML: a tab character in the indentation; indent with spaces "
            "(YAML does not allow tabs there)",
            _mark_line(mark),
        )
    if problem:
        context = getattr(exc, "context", None)
        text = f"{problem} ({context})" if context else str(problem)
    else:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return Problem("", f"invalid YAML: {text}", _mark_line(mark))


def _tab_indented(text: str, line: int) -> bool:
    lines = text.splitlines()
    if not 0 <= line < len(lines):
        return False
    row = lines[line]
    indent = row[: len(row) - len(row.lstrip(" \t"))]
    return "\t" in indent


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
                        f"the document expands to more than {MAX_NODES:,} values"
                        + (" (aliases referring to aliases?)" if aliases else "")
                        + "; an experiment file needs a few dozen",
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
        raise ConfigError([_yaml_problem(exc, text)], source) from None
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
                [Problem(key, f"--set: {where} is {_a(type(node).__name__)}, not a mapping")]
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


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: "an int", "a list"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
