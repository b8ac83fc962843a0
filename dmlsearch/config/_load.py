"""Error locations (field path and YAML line) and loading a file."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

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
