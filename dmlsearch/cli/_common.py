"""What the commands share: their options, output (console, JSON, tables), error handling
(one message and an exit code, never a traceback) and opening the registry."""

from __future__ import annotations

import contextvars
import errno
import functools
import json
import math
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from ..registry import Registry

F = TypeVar("F", bound=Callable[..., Any])

# -- shared options ------------------------------------------------------------------------

FileArg = Annotated[
    Path, typer.Argument(metavar="FILE", help="An experiment file (YAML).", show_default=False)
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="KEY.PATH=VALUE",
        help="Override a value of the file, e.g. --set search.n_trials=50 (repeatable; the "
        "value is read as YAML: 1e-3, true, [a, b]).",
    ),
]
RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        metavar="URL",
        help="Registry database URL. Default: $DMLSEARCH_REGISTRY, else ./dmlsearch.db.",
    ),
]
ArtifactsOpt = Annotated[
    str | None,
    typer.Option(
        "--artifacts",
        metavar="URL",
        help="Artifact store (folder or fsspec URL). Default: beside a SQLite registry, "
        "or $DMLSEARCH_ARTIFACTS.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (for scripts).")]
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (for scripts).")
]
ExperimentArg = Annotated[
    str, typer.Argument(metavar="EXPERIMENT", help="Experiment name (or id).", show_default=False)
]
ModelArg = Annotated[str, typer.Argument(metavar="NAME", help="Model name.", show_default=False)]


# -- output and errors ---------------------------------------------------------------------


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output is read by people too: do not squeeze tables into 80 columns.
    width = None if stream.isatty() else 200
    return Console(stderr=stderr, highlight=False, width=width)


#: The experiment file the running command read: messages name it in place of ``FILE``.
CURRENT_FILE: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "dmlsearch_cli_file", default=None
)


def _with_file(message: str) -> str:
    """``dmlsearch resume FILE`` as ``dmlsearch resume experiments/x.yaml`` when known."""
    file = CURRENT_FILE.get()
    if file is None:
        return message
    shown = shlex.quote(str(file))
    for command in ("resume", "run"):
        message = message.replace(f"`dmlsearch {command} FILE", f"`dmlsearch {command} {shown}")
    return message


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(_with_file(message), err=True)
    return typer.Exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler's walltime or scancel, ``kill``, ``docker stop``), met as
    Ctrl-C is: the experiment is recorded ``interrupted`` and can be resumed."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _without_traceback(text: str) -> str:
    """``text`` with a traceback in it cut to its last line, the error (a failed trial's
    full traceback stays in the registry, and in ``cv_results_``)."""
    head, found, trace = text.partition("Traceback (most recent call last):")
    if not found:
        return text
    lines = [line.strip() for line in trace.splitlines() if line.strip()]
    return f"{head.rstrip()} {lines[-1] if lines else ''}".rstrip()


@contextmanager
def _plain_warnings() -> Iterator[None]:
    """dmlsearch's own warnings as ``warning: <message>`` lines on stderr, as the errors
    are; Python's format names our source file and line, which mean nothing to a user of
    the command. Other packages' warnings keep Python's format (their file says whose)."""
    import warnings

    shown = warnings.showwarning
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def show(message: Any, category: Any, filename: str, *args: Any, **kwargs: Any) -> None:
        if os.path.abspath(filename).startswith(ours + os.sep):
            typer.echo(f"warning: {_without_traceback(str(message))}", err=True)
        else:
            shown(message, category, filename, *args, **kwargs)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


@contextmanager
def _errors() -> Iterator[None]:
    """Our errors become one message on stderr and an exit code, never a traceback."""
    from ..config import ConfigError
    from ..exceptions import DmlsearchError, InvalidParameterError
    from ..registry import NotFoundError, RegistryOpenError

    try:
        with _sigterm_as_interrupt(), _plain_warnings():
            yield
    except ConfigError as exc:
        raise _fail(f"error: {exc}", 2) from None
    except (InvalidParameterError, NotFoundError, RegistryOpenError) as exc:
        raise _fail(f"error: {exc}", 2) from None
    except DmlsearchError as exc:
        raise _fail(f"error: {exc}", 1) from None
    except Terminated:
        raise _fail(
            "terminated (SIGTERM); `dmlsearch resume FILE` continues from the recorded trials",
            143,
        ) from None
    except KeyboardInterrupt:
        raise _fail(
            "interrupted; `dmlsearch resume FILE` continues from the recorded trials", 130
        ) from None
    except (
        FileNotFoundError,
        FileExistsError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
    ) as exc:
        # A path given on the command line (or in a file) that cannot be read or written.
        raise _fail(f"error: {_os_error(exc)}", 2) from None
    except OSError as exc:
        if exc.errno != errno.EROFS or not exc.filename:
            raise
        # An output path on a read-only file system (which root's writes meet too).
        raise _fail(f"error: {_os_error(exc)}", 2) from None
    except Exception as exc:
        # A database the registry cannot reach or use (sqlalchemy is imported by then).
        sa_exc = sys.modules.get("sqlalchemy.exc")
        if sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError):
            raise _fail(f"error: registry database: {_first_line(exc)}", 2) from None
        raise


def _os_error(exc: OSError) -> str:
    """``path: No such file or directory`` rather than ``[Errno 2] ...``."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason


def _handled(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = CURRENT_FILE.set(None)
        try:
            with _errors():
                return func(*args, **kwargs)
        finally:
            CURRENT_FILE.reset(token)

    return wrapper  # type: ignore[return-value]


def _jsonable(obj: Any) -> Any:
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)


def _echo_json(obj: Any) -> None:
    typer.echo(json.dumps(_clean(obj), indent=2, default=_jsonable))


def _clean(obj: Any) -> Any:
    # json.dumps writes NaN, which is not JSON; scripts get null instead.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _records(frame: Any) -> list[dict[str, Any]]:
    return list(json.loads(frame.to_json(orient="records", date_format="iso")))


def _table(frame: Any, title: str | None = None) -> None:
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in frame.columns:
        table.add_column(str(column), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    _console().print(table)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if hasattr(value, "strftime"):
        return str(value.strftime("%Y-%m-%d %H:%M:%S"))
    return str(value)


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message (drivers add their own context below it)."""
    orig = getattr(exc, "orig", None)  # sqlalchemy wraps the driver's error
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def _registry_url(url: str | None, where: str = "--registry") -> str:
    """``url``, else the default; refuses (exit 2) a string that is not a database URL."""
    import os

    import sqlalchemy as sa

    from ..registry import default_registry_url

    if url is None:
        url = default_registry_url()
        where = "$DMLSEARCH_REGISTRY" if os.environ.get("DMLSEARCH_REGISTRY") else "the default"
    try:
        sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        hint = (
            f"sqlite:///{url}"
            if url.endswith((".db", ".sqlite", ".sqlite3"))
            else ("sqlite:///dmlsearch.db")
        )
        raise _fail(
            f"error: {where} {_safe(url)!r} is not a database URL; write e.g. {hint} or "
            "postgresql+psycopg://user@host/db",
            2,
        ) from None
    return url


def _open_registry(url: str | None, artifacts: str | None = None) -> Registry:
    """The registry at ``url``; commands other than run/resume never create one (exit 2)."""
    import sqlalchemy as sa

    from ..registry import NotFoundError, Registry, RegistryError

    url = _registry_url(url)
    parsed = sa.make_url(url)
    if (
        parsed.get_backend_name() == "sqlite"
        and parsed.database not in (None, "", ":memory:")
        and not Path(str(parsed.database)).expanduser().exists()
    ):
        raise _fail(
            f"error: no registry at {_safe(url)} (run an experiment first, or pass --registry URL "
            "or set DMLSEARCH_REGISTRY)",
            2,
        )
    try:
        return Registry(url, artifacts, create=False)
    except NotFoundError:
        raise
    except (RegistryError, sa.exc.SQLAlchemyError) as exc:
        # No database, no registry tables in it, a server that cannot be reached.
        raise _fail(_open_message(url, exc), 2) from None


def _open_message(url: str, exc: BaseException) -> str:
    """One line on why the registry at ``url`` cannot be opened."""
    text = _first_line(exc)
    if _safe(url) in text or url in text:
        return f"error: {text}"  # the registry's own message names the database
    return f"error: cannot open the registry at {_safe(url)}: {text}"


def _probe_registry(url: str) -> None:
    """Exit 2 before any work when a database server cannot be reached (or has no database).

    A run creates a SQLite file and a missing schema, so only the connection is tried.
    """
    import sqlalchemy as sa

    from ..registry import RegistryError
    from ..registry.sql import SQLStore

    if sa.make_url(url).get_backend_name() == "sqlite":
        return
    store: SQLStore | None = None
    try:
        store = SQLStore(url, migrate=False)
        store.schema_version()
    except (RegistryError, sa.exc.SQLAlchemyError) as exc:
        raise _fail(_open_message(url, exc), 2) from None
    finally:
        if store is not None:
            store.close()


def _safe(url: str) -> str:
    """``url`` with any password hidden (as the registry shows it everywhere)."""
    from ..registry.registry import shown_url

    return shown_url(url)


def _experiment(registry: Registry, name: str) -> Any:
    """The experiment called ``name`` (or with that id); an unknown name suggests one."""
    import difflib

    from ..registry import NotFoundError

    try:
        return registry.experiment(name)
    except NotFoundError:
        if name.isdigit():
            try:
                return registry.experiment(int(name))
            except NotFoundError:
                pass
        names = list(registry.experiments()["name"])
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = "" if close else " (`dmlsearch list` shows them)"
        raise _fail(
            f"error: no experiment {name!r} in {registry.shown_url}{hint}{listing}", 2
        ) from None


# -- confirmation and deletion -------------------------------------------------------------


def _confirm(question: str) -> None:
    """Ask; anything but yes (or no terminal to ask on) stops with exit code 1."""
    try:
        ok = typer.confirm(question, default=False)
    except typer.Abort:
        ok = False
    if not ok:
        raise _fail("nothing deleted (pass --yes to delete without a question)", 1)


def _deleted(summary: dict[str, Any]) -> str:
    """``12 trials, 1 artifact`` from a deletion summary."""
    parts = []
    for key in ("trials", "artifacts", "versions"):
        value = summary.get(key)
        if isinstance(value, (list, tuple, set, dict)):
            value = len(value)
        if isinstance(value, int):
            parts.append(f"{value} {key[:-1] if value == 1 else key}")
    return ", ".join(parts) or "nothing else"
