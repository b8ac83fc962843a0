"""The check that a script starting the embedded cluster can be re-run by its workers.

Worker processes start by *spawn*: each re-imports the main script, so code that starts a
search must sit under ``if __name__ == "__main__":`` (else every worker starts a cluster
of its own). These functions find an unguarded call before any process starts, and say
which line to move.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys

import dask

from ..exceptions import DmlsearchError

__all__ = ["check_main_guard", "unguarded_main_call"]


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    consts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and consts == ["__main__"]


def unguarded_main_call() -> tuple[str, int] | None:
    """Where a script runs dmlsearch at its top level outside ``if __name__ == "__main__":``.

    Worker processes started with ``spawn`` re-import the main script; unguarded, each one
    would start the search (and a cluster) again. Returns ``(path, line)`` of the call in
    the script, or None when the call is guarded, made from a function, or there is no
    script (a notebook, ``python -c``, an interactive session).
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not os.path.isfile(path):
        return None
    spec_name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if spec_name.endswith(".__main__"):
        # `python -m package`: multiprocessing never re-runs a package's __main__.
        return None
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if frame.f_globals is vars(main) and code.co_name == "<module>":
            break
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and _is_main_guard(node)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ):
            return None
    return path, line


def check_main_guard() -> None:
    method = dask.config.get("distributed.worker.multiprocessing-method", "spawn")
    if method not in ("spawn", "forkserver"):
        return
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A worker process of an earlier (guarded) search re-imports the script and meets
        # an unguarded one: starting a cluster from there fails in multiprocessing, and
        # the worker never starts, so the earlier search waited for it for ever.
        raise DmlsearchError(
            f"{_module_line()}: the embedded cluster's worker processes re-run this script "
            'and met a search outside `if __name__ == "__main__":`; put every line that '
            "starts a search (or a cluster) under it (or pass client= an existing cluster)"
        )
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file == "<stdin>":  # `python - < script.py`: no file for a worker to re-import
        raise DmlsearchError(
            "the embedded cluster's worker processes re-import the main script, and a script "
            "read from standard input has no file: save it to a file and run that, or pass "
            "client= an existing cluster"
        )
    where = unguarded_main_call()
    if where is not None:
        path, line = where
        raise DmlsearchError(
            f"{os.path.basename(path)}, line {line}: the embedded cluster's worker processes "
            "re-run this script; put the code that starts the search under "
            '`if __name__ == "__main__":` (or pass client= an existing cluster)'
        )


def _module_line() -> str:
    """``script.py, line N`` of the module-level code running now (``the script``)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "the script"
    return f"{os.path.basename(frame.f_code.co_filename)}, line {frame.f_lineno}"
