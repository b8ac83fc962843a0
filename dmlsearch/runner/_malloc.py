"""Worker side: glibc's allocator set for tensor-sized blocks while dmlsearch's tasks run.

Dask's nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (Dask's config
``distributed.nanny.pre-spawn-environ``) so that freed memory goes back to the system at
once. Setting that threshold also switches off glibc's dynamic mmap threshold, which then
stays at its 128 KiB floor for the life of the process: every larger block (a batch's
activations, a gradient, a scikit-learn temporary) is a fresh ``mmap`` of zero-filled
pages, ``munmap``-ed when freed, and a heap that grows past 64 KiB of free space is cut
back at each ``free``. A torch MLP trained in a Dask worker ran about 40 % slower than in
a plain process for this reason alone, with 7 times the page faults (docs/benchmarks.md,
"The workers' allocator").

While a task of ours runs, the mmap threshold is raised to 32 MiB (glibc's largest on
64-bit systems) and the trim threshold to 64 MiB (what glibc's dynamic rule would set).
When the last of them ends, both go back (128 KiB, the floor Dask's setting left in force,
and the variable's own value) and the free memory is handed back (``malloc_trim``): a task
keeps at most its own peak, and the worker between tasks is as Dask intends. Nothing is
changed where glibc's dynamic threshold is still on (no such variable: glibc adapts by
itself), where the user set glibc's malloc tunables, off glibc, or with Dask's config
``dmlsearch.worker.tune-malloc: false``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .._dask_config import config_flag

__all__ = ["CONFIG_KEY", "call_tuned", "malloc_tuned"]

CONFIG_KEY = "dmlsearch.worker.tune-malloc"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
RAISED_MMAP = 32 * 1024 * 1024  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit; larger is refused
RAISED_TRIM = 2 * RAISED_MMAP  # as glibc's dynamic rule pairs them
FLOOR = 128 * 1024  # glibc's default for both: the mmap one in force once frozen
# Variables that switch glibc's dynamic mmap threshold off at start-up.
_FREEZING = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_lock = threading.Lock()
_depth = 0
_libc: Any = None
_trim_restore = FLOOR
_checked = False


def _glibc() -> Any:
    """glibc's handle where tuning applies in this process, else None (decided once)."""
    global _libc, _checked, _trim_restore
    if _checked:
        return _libc
    _checked = True
    env = os.environ
    if "MALLOC_MMAP_THRESHOLD_" in env or "glibc.malloc." in env.get("GLIBC_TUNABLES", ""):
        return None  # the user's own settings
    if not any(name in env for name in _FREEZING):
        return None  # glibc's dynamic threshold adapts to large blocks by itself
    try:
        _trim_restore = int(env.get("MALLOC_TRIM_THRESHOLD_", FLOOR))
    except ValueError:  # glibc ignores a malformed value: its default stands
        _trim_restore = FLOOR
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (AttributeError, OSError, ValueError):  # not glibc, or no confstr name
        return None
    _libc = libc
    return libc


def _enabled() -> bool:
    return config_flag(CONFIG_KEY)


@contextlib.contextmanager
def malloc_tuned() -> Iterator[None]:
    """Raise glibc's mmap threshold while the block runs (see the module's docstring).

    Nested and concurrent uses (a worker with several threads) share one raise: the
    threshold goes back when the last one ends.
    """
    global _depth
    libc = _glibc() if _enabled() else None
    if libc is None:
        yield
        return
    with _lock:
        if _depth == 0:
            libc.mallopt(M_MMAP_THRESHOLD, RAISED_MMAP)
            libc.mallopt(M_TRIM_THRESHOLD, RAISED_TRIM)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                libc.mallopt(M_MMAP_THRESHOLD, FLOOR)
                libc.mallopt(M_TRIM_THRESHOLD, _trim_restore)
                libc.malloc_trim(0)


def call_tuned(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` under :func:`malloc_tuned` (a task function for ``client.submit``)."""
    with malloc_tuned():
        return fn(*args)
