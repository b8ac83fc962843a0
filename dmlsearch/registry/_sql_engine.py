"""Opening the registry's database: URLs, engines, SQLite pragmas, and error classification.

Separate from the store because it is about reaching a database (drivers, connection
setup, which errors mean "unavailable for now"), not about what the registry records.
"""

from __future__ import annotations

import os
import random
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from ..exceptions import InvalidParameterError
from ._base import RegistryError, RegistryOpenError

# Execution option that makes the SQLite 'begin' hook emit BEGIN IMMEDIATE.
_WRITE_OPTION = "dmlsearch_write"
_SQLITE_BUSY_TIMEOUT_S = 30.0
# Seconds a PostgreSQL connection attempt may take before the server counts as unavailable.
_PG_CONNECT_TIMEOUT_S = 10


def default_registry_url() -> str:
    """``$DMLSEARCH_REGISTRY``, or a SQLite file ``dmlsearch.db`` in the working directory."""
    return os.environ.get("DMLSEARCH_REGISTRY") or f"sqlite:///{Path.cwd() / 'dmlsearch.db'}"


# -- SQLite connection setup ------------------------------------------------------------------


def _sqlite_on_connect(busy_timeout: float) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own transaction handling would BEGIN (deferred) lazily; we emit BEGIN
        # ourselves in _sqlite_on_begin (SQLAlchemy's documented recipe).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            _sqlite_enable_wal(cursor, busy_timeout)
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    return on_connect


def _sqlite_enable_wal(cursor: Any, busy_timeout: float) -> None:
    """Switch the database to WAL (persistent, so usually a no-op).

    Two connections switching a new database at once can get "database is locked" at once,
    without the busy timeout being waited (measured here: 12 failures in 300 rounds of 6
    threads); retry for as long as the busy timeout would have waited.
    """
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.fetchall()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(random.uniform(0, delay))
        delay = min(2 * delay, 0.1)


def _sqlite_on_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get(_WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def parse_registry_url(url: str | sa.URL) -> sa.URL:
    """``url`` as a SQLAlchemy URL; raises RegistryError saying what to write instead.

    A bare file name such as ``foo.db`` is not a URL: the message suggests ``sqlite:///foo.db``.
    ``postgres://`` (Heroku's and libpq's spelling, which SQLAlchemy refuses) is read as
    ``postgresql+psycopg://``, and ``postgres+driver://`` as ``postgresql+driver://``.
    """
    if isinstance(url, sa.URL):
        return _postgresql_spelled(url)
    if not isinstance(url, str):
        raise InvalidParameterError(
            "url", f"expected a database URL (str), got {type(url).__name__} {url!r}"
        )
    try:
        return _postgresql_spelled(sa.make_url(url))
    except (sa.exc.ArgumentError, ValueError):
        pass
    path = url.strip()
    hint = (
        f"write sqlite:///{path} for a SQLite file (sqlite:////absolute/path.db for an "
        "absolute path)"
        if path and "://" not in path
        else "write sqlite:///path/to/file.db or postgresql+psycopg://user@host/dbname"
    )
    raise RegistryError(f"{url!r} is not a database URL: {hint}")


def _postgresql_spelled(url: sa.URL) -> sa.URL:
    """``url`` with SQLAlchemy's name of PostgreSQL, and dmlsearch's driver if it names none."""
    backend, _, driver = url.drivername.partition("+")
    if backend != "postgres":
        return url
    return url.set(drivername=f"postgresql+{driver or 'psycopg'}")


_TRUE = ("true", "1", "yes", "on")


def sqlite_path(url: sa.URL) -> Path | None:
    """The file of a SQLite URL (None for other backends and in-memory databases)."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database.startswith("file:") and str(url.query.get("uri", "")).lower() in _TRUE:
        # A SQLite URI filename (sqlite:///file:path?mode=ro&uri=true): the path is in it.
        database = urllib.parse.unquote(urllib.parse.urlsplit(database).path)
    if database in ("", ":memory:") or url.query.get("mode") == "memory":
        return None
    return Path(database).expanduser().resolve()


def _make_engine(
    url: sa.URL, engine_kwargs: Mapping[str, Any], *, busy_timeout: float, create: bool
) -> tuple[Engine, bool]:
    """Engine for ``url``; the flag says it is an in-memory SQLite database."""
    backend = url.get_backend_name()
    shown = url.render_as_string(hide_password=True)
    kwargs = dict(engine_kwargs)
    try:
        if backend == "sqlite":
            path = sqlite_path(url)
            memory = path is None
            if path is None:
                # One shared connection, else every connection would see its own empty
                # database.
                kwargs.setdefault("poolclass", StaticPool)
                kwargs.setdefault("connect_args", {"check_same_thread": False})
            elif not create and not path.exists():
                # Connecting would create the file: a reader must not.
                raise RegistryError(
                    f"no registry at {shown}: {path} does not exist (run an experiment "
                    "first, or check the URL)"
                )
            elif create:
                path.parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(url, **kwargs)
            sa.event.listen(engine, "connect", _sqlite_on_connect(busy_timeout))
            sa.event.listen(engine, "begin", _sqlite_on_begin)
            return engine, memory
        if backend == "postgresql":
            kwargs.setdefault("pool_pre_ping", True)
            if "connect_timeout" not in url.query:
                connect_args = dict(kwargs.get("connect_args", {}))
                connect_args.setdefault("connect_timeout", _PG_CONNECT_TIMEOUT_S)
                kwargs["connect_args"] = connect_args
            return sa.create_engine(url, **kwargs), False
    except (ImportError, sa.exc.NoSuchModuleError) as exc:
        raise RegistryOpenError(
            f"cannot open the registry at {shown}: its database driver is not installed "
            f"({exc}); for PostgreSQL install dmlsearch[postgres] and use postgresql+psycopg://"
        ) from None
    raise InvalidParameterError(
        "url",
        f"SQLStore supports sqlite:/// and postgresql+psycopg:// URLs, got {backend!r} ({shown})",
    )


def _one_line(exc: BaseException) -> str:
    """The driver's message of a database error, on one line."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


_SQLITE_UNAVAILABLE = ("locked", "busy", "unable to open", "disk i/o")

# Server messages of a failed connection that name what is missing (libpq gives no SQLSTATE
# for them; an English server, else the generic hint).
_PG_MISSING = re.compile(r'\b(database|role) "([^"]*)" does not exist')
_PG_SEARCH_PATH = re.compile(r"search_path\s*=\s*([^\s,]+)")


def _postgres_open_hint(exc: BaseException, message: str, url: sa.URL) -> str:
    """What to do about the PostgreSQL database at ``url`` that could not be opened.

    Only a missing database gets "createdb": a missing role, schema or privilege
    said so too, and a missing column was told to create the database.
    """
    missing = _PG_MISSING.search(message)
    if missing and missing.group(1) == "database":
        name = missing.group(2)
        return f"create it (createdb {name} or CREATE DATABASE {name}) or fix the URL"
    if missing:
        name = missing.group(2)
        return (
            f"create the role (createuser {name} or CREATE ROLE {name} LOGIN) or fix the "
            "user name in the URL"
        )
    if "password authentication failed" in message:
        return "check the user name and password in the URL"
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)
    if sqlstate == "3F000":  # invalid_schema_name: no schema of search_path can be used
        found = _PG_SEARCH_PATH.search(str(url.query.get("options", "")))
        schema = found.group(1) if found else "<schema>"
        return (
            f"create the schema (CREATE SCHEMA {schema}), let the URL's user use it (GRANT "
            f"USAGE, CREATE ON SCHEMA {schema} TO <user>) or fix search_path in the URL"
        )
    if sqlstate == "42501":  # insufficient_privilege: PostgreSQL 15 no longer lets any
        # user create tables in the public schema.
        return (
            "let the URL's user create tables there (GRANT CREATE ON SCHEMA <schema> TO "
            "<user>), or use a database or schema it owns"
        )
    if isinstance(exc, sa.exc.OperationalError):
        return "check that the server is running and that the URL is right"
    return "check the URL and that its user may create tables in the database"


def _is_foreign_key_violation(exc: BaseException) -> bool:
    """Whether ``exc`` is a row referring to one that is not there (deleted meanwhile)."""
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) == "23503":  # PostgreSQL's foreign_key_violation
        return True
    # sqlite_errorname is Python 3.11+; the message is SQLite's own, in English.
    return "FOREIGN KEY constraint failed" in str(orig)


def _is_read_only(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused because the database is read-only.

    A PostgreSQL replica (hot standby) or ``default_transaction_read_only``; a SQLite file
    opened with ``mode=ro`` or that cannot be written.
    """
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) == "25006":  # read_only_sql_transaction
        return True
    return "readonly database" in str(orig)  # SQLite's SQLITE_READONLY, in English


def _is_unavailable(exc: BaseException, dialect: str) -> bool:
    """Whether ``exc`` says the database is out of reach for now (worth retrying later)."""
    if isinstance(exc, sa.exc.TimeoutError):  # no pooled connection became free
        return True
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sa.exc.OperationalError):
        if dialect == "sqlite":
            message = str(exc.orig).lower()
            return any(word in message for word in _SQLITE_UNAVAILABLE)
        return True
    return isinstance(exc, sa.exc.InterfaceError)
