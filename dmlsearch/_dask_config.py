"""dmlsearch's switches in Dask's config, read as Dask's own YAML would read them."""

from __future__ import annotations

import dask

from .exceptions import InvalidParameterError

__all__ = ["config_flag"]

_FALSE = ("false", "0", "no", "off")
_TRUE = ("true", "1", "yes", "on")


def config_flag(key: str, default: bool = True) -> bool:
    """The boolean Dask config value ``key``.

    ``dask.config.set({key: "false"})`` holds the string, which ``bool()`` would take for
    True: a switch written as text is read as YAML reads it, and anything else is refused.
    """
    value = dask.config.get(key, default)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _FALSE or text in _TRUE:
            return text in _TRUE
        raise InvalidParameterError(key, f"expected true or false, got {value!r}")
    return bool(value)
