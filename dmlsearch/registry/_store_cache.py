"""Open artifact stores, shared within a process by location, folder and options.

Workers open one per task otherwise (each task brings its own copy of its context), and
an fsspec filesystem of an object store is slow to build. The options are part of the key
(two registries of one bucket may use other credentials) but never shown.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["cached_store"]

_LOCK = threading.Lock()
_STORES: dict[tuple[str, str, str], Any] = {}
_MAX_STORES = 8


def cached_store(url: str, folder: str, options: Mapping[str, Any] | None = None) -> Any:
    """The :class:`~dmlsearch.registry.artifacts.ArtifactStore` at ``url`` with namespace
    ``folder``, opened with fsspec ``options`` (an open one when this process has it)."""
    from .artifacts import ArtifactStore

    key = (url, folder, json.dumps(dict(options or {}), sort_keys=True, default=repr))
    with _LOCK:
        store = _STORES.get(key)
    if store is None:
        store = ArtifactStore(url, namespace=folder, **dict(options or {}))
        with _LOCK:
            if len(_STORES) >= _MAX_STORES:
                _STORES.clear()
            _STORES[key] = store
    return store
