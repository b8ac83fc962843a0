"""Error locations (field path and YAML line) and loading a file."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from ._common import MAX_FILE_BYTES, SCHEMA_VERSION, ConfigError, Loc, Problem, _suggest
from ._yaml import _apply_override, _load_yaml, _mark_line, _unshare
from .schema import ExperimentConfig

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


def _in_file(root: yaml.Node | None, loc: Loc) -> bool:
    """Whether the file itself has the field at ``loc`` (every key along it)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next(
                (
                    v
                    for k, v in _mapping_pairs(node)
                    if isinstance(k, yaml.ScalarNode) and k.value == str(part)
                ),
                None,
            )
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if 0 <= part < len(node.value) else None
        else:
            return False
        if node is None:
            return False
    return True


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


def _choices_hint(loc: Loc) -> str:
    """``: one of a, b`` for a field at ``loc`` that takes a fixed set of words."""
    import typing

    model: Any = ExperimentConfig
    for part in loc[:-1]:
        info = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        model = _model_of(info.annotation) if info is not None else None
        if model is None:
            return ""
    info = next((f for n, f in model.model_fields.items() if loc[-1] in (n, f.alias)), None)
    if info is None or typing.get_origin(info.annotation) is not Literal:
        return ""
    return f" (one of {', '.join(str(a) for a in typing.get_args(info.annotation))})"


def _model_of(annotation: Any) -> Any:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


#: pydantic's messages ("Input should be a valid integer") in the words of this file's
#: docs, each saying what is allowed.
_EXPECTED = {
    "string_type": "expected text",
    "string_unicode": "expected UTF-8 text",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "int_parsing_size": "expected an integer of at most 19 digits",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    # Only integer fields reach pydantic's own number checks (seconds and bounds have ours).
    "finite_number": "expected an integer",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected a list (- item lines, or [a, b])",
    "dict_type": "expected a mapping of name: value",
    "none_required": "expected nothing (null)",
}


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
    if kind == "invalid_key":
        names = _valid_keys(loc[:-1])
        where = f" ({', '.join(names)})" if names else ""
        return f"keys are names{where}, got {_yaml_word(err.get('input'))}"
    if kind == "missing":
        if not loc:
            return "required key is missing"
        return f"required key {loc[-1]!r} is missing{_choices_hint(loc)}"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "literal_error" and loc == ("version",):
        return f"this dmlsearch reads version {SCHEMA_VERSION}"
    ctx = err.get("ctx") or {}
    if kind == "model_type":
        keys = _valid_keys(loc) or []
        msg = "expected a mapping" + (f" with keys among {', '.join(keys)}" if keys else "")
    elif kind == "literal_error":
        msg = f"expected {ctx.get('expected', msg.removeprefix('Input should be '))}"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        sign = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
                "less_than_equal": "<="}[kind]  # fmt: skip
        bound = next(iter(ctx.values()), "?")
        what = "an integer" if isinstance(bound, int) else "a number"
        msg = f"expected {what} {sign} {bound}"
    elif kind in _EXPECTED:
        msg = _EXPECTED[kind]
    elif msg.startswith("Input should be "):
        msg = "expected " + msg[len("Input should be ") :]
    value = err.get("input")
    if kind != "dmlsearch" and isinstance(value, (str, int, float)):
        msg += f", got {_short_repr(value)}"
    elif kind != "dmlsearch" and value is None:
        msg += ", got an empty value (null)"
    elif kind != "dmlsearch":
        msg += f", got a {_type_word(value)}"
    return msg


def _yaml_word(value: Any) -> str:
    """A scalar as YAML writes it: ``true``, ``null``, ``3``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_word(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _from_override(override: Loc, loc: Loc, root: yaml.Node | None) -> bool:
    """Whether the problem at ``loc`` comes from ``override``: it is at (or inside) the
    value the override set, or in a section the override added (the file has no such
    section: ``--set scheduler.kind=asha`` to a file without ``scheduler``, whose missing
    keys have no line in the file)."""
    if loc[: len(override)] == override:
        return True
    common = 0
    for a, b in zip(override, loc, strict=False):
        if a != b:
            break
        common += 1
    return common > 0 and not _in_file(root, loc[:common])


def _problems_from(
    exc: ValidationError, root: yaml.Node | None, overrides: dict[Loc, str], data: Any
) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors():
        loc = tuple(err["loc"])
        if err["type"] == "invalid_key" and loc:  # the key as written (`3`, `true`, `null`)
            loc = (*loc[:-1], _yaml_word(err.get("input")))
        path = _format_path(loc)
        message = _message(err)
        if (path, message) in seen:
            continue
        seen.add((path, message))
        origin = next((expr for o, expr in overrides.items() if _from_override(o, loc, root)), None)
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
    if data is None:  # an empty file, a lone `---` or `null`: nothing in it yet
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                Problem(
                    "",
                    f"expected a mapping of sections (version, name, data, model, search, ...), "
                    f"got {_root_word(data)}",
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


def _root_word(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    if isinstance(data, bool):
        return "true or false"
    if isinstance(data, (int, float)):
        return "a number"
    if isinstance(data, str):
        return "a line of text (is the file indented, or missing `key: value`?)"
    return f"a {type(data).__name__}"


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
