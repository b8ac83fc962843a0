"""Constants, the problem list and ConfigError."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import (
    ValidationError,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..exceptions import DmlsearchError

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


def check_model_name(problems: _Problems, loc: Loc, value: str | None, suffix: str = "") -> None:
    """Add a problem at ``loc`` where ``value`` (and ``value + suffix``, a name derived from
    it) cannot be a registry model's name: what a run would refuse only after its work."""
    from ..exceptions import InvalidParameterError
    from ..registry._checks import check_model_name as registry_check

    if value is None:
        return
    for name in (value, value + suffix) if suffix else (value,):
        try:
            registry_check(str(loc[-1]), name)
        except InvalidParameterError as exc:
            problems.add(loc, str(exc).split(": ", 1)[-1], value)
            return


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
