"""docs/api.md's exception tree is the code's: every error type dmlsearch defines is in it,
under its real parent, with its real bases, and importable from a public module."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import dmlsearch
from dmlsearch.exceptions import DmlsearchError

PUBLIC = (
    "dmlsearch",
    "dmlsearch.exceptions",
    "dmlsearch.registry",
    "dmlsearch.config",
    "dmlsearch.ensemble",
    "dmlsearch.training",
)
_LINE = re.compile(r"^(?P<indent>[│ ]*)(?:[├└]── )?(?P<name>[A-Za-z]+)(?:\((?P<bases>[^)]*)\))?")


def _tree() -> list[tuple[int, str, str | None]]:
    """(depth, name, bases as written or None) for each line of the documented tree."""
    text = (Path(dmlsearch.__file__).parents[1] / "docs" / "api.md").read_text()
    block = text.split("<!-- exception-tree:", 1)[1].split("```", 2)[1]
    rows = []
    for line in block.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        depth = len(match["indent"]) // 4 + (1 if "──" in line else 0)
        rows.append((depth, match["name"], match["bases"]))
    return rows


def _defined() -> dict[str, type]:
    for name in PUBLIC:
        importlib.import_module(name)
    found: dict[str, type] = {}
    todo = [DmlsearchError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("dmlsearch") and not cls.__name__.startswith("_"):
            found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def _public(cls: type) -> list[str]:
    modules = [importlib.import_module(name) for name in PUBLIC]
    return [m.__name__ for m in modules if cls.__name__ in getattr(m, "__all__", ())]


def test_every_error_type_is_in_the_documented_tree():
    documented = {name for _, name, _ in _tree()}
    assert sorted(set(_defined()) - documented) == []
    assert sorted(documented - set(_defined())) == []


def test_each_documented_parent_and_base_is_real():
    defined = _defined()
    parents: list[str] = []
    for depth, name, bases in _tree():
        del parents[depth:]
        cls = defined[name]
        if parents:
            assert defined[parents[-1]] in cls.__bases__, (name, parents[-1])
        if bases is not None:
            written = [b.strip() for b in bases.split(",") if b.strip() != "..."]
            real = [b.__name__ for b in cls.__bases__]
            assert written == real[: len(written)], (name, written, real)
        parents.append(name)


def test_each_error_type_is_importable_from_a_public_module():
    assert {name: _public(cls) for name, cls in _defined().items() if not _public(cls)} == {}
