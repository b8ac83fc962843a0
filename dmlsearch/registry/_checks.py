"""Argument checks of the registry's public methods, made before anything reaches SQL.

A wrong type or a value the database cannot hold would otherwise surface as a driver error
(``ProgrammingError``, ``DataError``, ``OverflowError``, ``UnicodeEncodeError``) naming a SQL
statement, and differently on SQLite and PostgreSQL; here it is an InvalidParameterError
naming the argument.
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from ..exceptions import InvalidParameterError

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_NAME",
    "check_alias_name",
    "check_bool",
    "check_count",
    "check_mapping",
    "check_model_name",
    "check_new_name",
    "check_number",
    "check_states",
    "check_text",
]

#: PostgreSQL's INTEGER: ids and version numbers.
INT32_MAX = 2**31 - 1
#: 64-bit integers: paging and anything stored as BIGINT.
INT64_MAX = 2**63 - 1
#: Longest experiment, model, alias and tag-key name every store holds (the store contract),
#: checked before anything is written so that no store refuses a name after a blob is saved.
MAX_NAME = 256


def _described(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def check_text(
    param: str,
    value: object,
    what: str,
    *,
    max_length: int | None = None,
    hint: str = "",
    optional: bool = False,
) -> None:
    """A non-blank str the database can store (no NUL, valid Unicode, not too long)."""
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise InvalidParameterError(param, f"expected {what} (str), got {_described(value)}{hint}")
    if not value.strip():
        raise InvalidParameterError(param, f"{what} must not be empty or blank, got {value!r}")
    if max_length is not None and len(value) > max_length:
        raise InvalidParameterError(
            param, f"{what} must be at most {max_length} characters, got {len(value)}"
        )
    if "\x00" in value:
        raise InvalidParameterError(param, f"{what} must not contain NUL characters: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(
            param, f"{what} is not valid Unicode text ({exc.reason}): {value!r}"
        ) from None


#: Alias names that read as a version in ``name@alias`` (MLflow reserves the same).
_VERSION_LIKE = re.compile(r"latest|v?\d+|version\d+", re.IGNORECASE)
# Control characters and line breaks: a name must print on one line, as typed.
_CONTROL = frozenset({"Cc", "Zl", "Zp"})


def check_new_name(param: str, value: object, what: str, *, max_length: int | None = None) -> None:
    """A name about to be created: :func:`check_text`, on one line, without surrounding spaces.

    Lookups stay lenient so that a name stored before these rules can still be read and
    deleted.
    """
    check_text(param, value, what, max_length=max_length)
    assert isinstance(value, str)
    if value != value.strip():
        raise InvalidParameterError(
            param, f"{what} must not start or end with whitespace, got {value!r}"
        )
    if any(unicodedata.category(ch) in _CONTROL for ch in value):
        raise InvalidParameterError(
            param, f"{what} must not contain control characters (newline, tab...), got {value!r}"
        )


def check_model_name(
    param: str, value: object, what: str = "a model name", *, max_length: int | None = None
) -> None:
    """A new model name: :func:`check_new_name`, and no ``@`` (``name@alias`` is an alias)."""
    check_new_name(param, value, what, max_length=max_length)
    if "@" in str(value):
        raise InvalidParameterError(
            param,
            f"{what} must not contain '@', got {value!r}: 'name@alias' loads an alias, so "
            "the model could not be loaded by name",
        )


def check_alias_name(param: str, value: object, *, max_length: int | None = None) -> None:
    """A new alias: :func:`check_new_name`, and not ``latest`` or a version (``3``, ``v3``)."""
    check_new_name(param, value, "an alias name", max_length=max_length)
    if _VERSION_LIKE.fullmatch(str(value)):
        raise InvalidParameterError(
            param,
            f"alias {value!r} would read as a version, not an alias; choose a name such as "
            "'champion' or 'prod' (for a version, pass version=N)",
        )


def check_count(
    param: str,
    value: object,
    what: str,
    *,
    minimum: int = 0,
    maximum: int = INT64_MAX,
    optional: bool = False,
) -> None:
    """An int (not a bool) in ``[minimum, maximum]``."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidParameterError(param, f"expected {what} (int), got {_described(value)}")
    if not minimum <= int(value) <= maximum:
        raise InvalidParameterError(
            param, f"{what} must be between {minimum} and {maximum}, got {value!r}"
        )


def check_number(param: str, value: object, what: str, *, optional: bool = False) -> None:
    """A finite real number (not a bool)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameterError(param, f"expected {what} (a number), got {_described(value)}")
    try:
        finite = math.isfinite(float(value))
    except OverflowError:
        finite = False
    if not finite:
        raise InvalidParameterError(param, f"{what} must be a finite number, got {value!r}")


def check_bool(param: str, value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidParameterError(param, f"must be True or False, got {_described(value)}")


def check_mapping(param: str, value: object, what: str, *, optional: bool = True) -> None:
    """A mapping with str keys (``None`` too when ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, Mapping):
        raise InvalidParameterError(param, f"expected {what} (a dict), got {_described(value)}")
    for key in value:
        check_text(param, key, f"a key of {param}")


def check_states(param: str, value: Any) -> None:
    """A trial state, or a list of them (None: any)."""
    if value is None or isinstance(value, str):
        check_text(param, value, "a trial state", optional=True)
        return
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise InvalidParameterError(
            param, f"expected a trial state (str) or a list of them, got {_described(value)}"
        )
    for state in value:
        check_text(param, state, "a trial state")
