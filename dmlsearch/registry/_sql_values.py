"""How values travel to and from the registry's columns, and the checks made before they do.

JSON text (the same bytes on both backends), NaN stored as NULL, ids chunked for IN lists,
and argument checks that refuse a wrong value before the database driver sees it. Shared
by every part of ``SQLStore``, so kept apart from each.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any, overload

from ..exceptions import InvalidParameterError
from ._base import ModelVersionRecord
from ._checks import INT32_MAX, MAX_NAME, check_count, check_text

# -- JSON ------------------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays (common in parameter grids) become Python numbers and lists.
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    # Anything else (an estimator given as a parameter) is kept readable, not restorable.
    return repr(obj)


def _dumps(obj: Any) -> str:
    text = json.dumps(obj, default=_json_default, ensure_ascii=False, separators=(",", ":"))
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (from a file name, say) that no database encoding can hold:
        # escaped, it still loads back as the same string.
        return json.dumps(obj, default=_json_default, separators=(",", ":"))
    return text


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# -- free text -------------------------------------------------------------------------------

#: What a character that no backend can store becomes (JSON keeps them all, escaped).
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


@overload
def _free_text(text: str) -> str: ...
@overload
def _free_text(text: None) -> None: ...
def _free_text(text: str | None) -> str | None:
    """``text`` as both backends store it: NUL and lone surrogates become U+FFFD.

    PostgreSQL's text type cannot hold NUL (the whole statement fails: a trial's error
    message with one lost its batch) and no UTF-8 database holds a lone surrogate; SQLite
    is given the same text so that both backends read back alike.
    """
    if text is None:
        return None
    text = text.replace("\x00", REPLACEMENT)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _SURROGATE.sub(REPLACEMENT, text)
    return text


def _float_or_none(x: Any) -> float | None:
    if x is None:
        return None
    value = float(x)
    # SQLite turns NaN into NULL while PostgreSQL sorts NaN above every number; store None.
    return None if math.isnan(value) else value


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _check_name(param: str, value: object, max_length: int = MAX_NAME) -> None:
    # PostgreSQL would refuse an over-long VARCHAR where SQLite stores it: refuse it on both.
    check_text(param, value, "a name", max_length=max_length)


def _check_experiment_key(param: str, value: object) -> None:
    if isinstance(value, str):
        check_text(param, value, "an experiment name", max_length=MAX_NAME)
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParameterError(
            param,
            f"expected an experiment name (str) or id (int), got {type(value).__name__} {value!r}",
        )
    check_count(param, value, "an experiment id", minimum=1, maximum=INT32_MAX)


def _check_model_args(model: object, version: object = None, alias: object = None) -> None:
    """Refuse a wrong type before it reaches the database driver (a ProgrammingError there)."""
    hint = ""
    if isinstance(model, ModelVersionRecord):
        hint = " (for a ModelVersionRecord, pass record.model and version=record.version)"
    check_text("model", model, "a model name", max_length=MAX_NAME, hint=hint)
    check_count("version", version, "a version number", minimum=1, maximum=INT32_MAX, optional=True)
    check_text("alias", alias, "an alias name", max_length=MAX_NAME, optional=True)


def _check_paging(offset: object, limit: object) -> None:
    check_count("offset", offset, "an offset")
    check_count("limit", limit, "a page size", optional=True)


def _states(state: str | Sequence[str] | None) -> list[str] | None:
    if state is None:
        return None
    return [state] if isinstance(state, str) else list(state)
