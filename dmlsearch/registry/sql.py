"""``SQLStore``: the registry's metadata in SQLite (default) or PostgreSQL (at scale).

SQLAlchemy Core only. JSON-valued fields are TEXT written with ``json.dumps`` so that both
backends store the same bytes. Writes on SQLite take the database lock up front
(``BEGIN IMMEDIATE``) under WAL with a 30 s busy timeout: a deferred transaction that reads
and then writes cannot wait for the lock and fails with "database is locked" instead.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import StaticPool

from ..exceptions import InvalidParameterError
from ._base import (
    COMPLETE,
    RUNNING,
    AlreadyExistsError,
    ExperimentRecord,
    ModelSummary,
    ModelVersionRecord,
    NotFoundError,
    RegistryError,
    RegistryStore,
    RegistryUnavailableError,
    TrialRecord,
    now,
)
from ._checks import INT32_MAX, check_count, check_mapping, check_number, check_states, check_text

__all__ = ["SCHEMA_VERSION", "SQLStore", "default_registry_url"]

SCHEMA_VERSION = 2

# Execution option that makes the SQLite 'begin' hook emit BEGIN IMMEDIATE.
_WRITE_OPTION = "dmlsearch_write"
# Key of the PostgreSQL advisory lock that serializes schema creation/migration.
_MIGRATION_LOCK_KEY = 0x646D6C73  # "dmls"
_SQLITE_BUSY_TIMEOUT_S = 30.0
# Seconds a PostgreSQL connection attempt may take before the server counts as unavailable.
_PG_CONNECT_TIMEOUT_S = 10
# Trials per statement on PostgreSQL (arrays of this length, one per column).
_PG_TRIAL_CHUNK = 10_000
# Length of name columns (experiments, models, aliases, tag keys).
_MAX_NAME = 256
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Cap on the ids in one IN (...) list.
_IN_CHUNK = 500

metadata = sa.MetaData()

schema_info = sa.Table(
    "schema_info",
    metadata,
    sa.Column("version", sa.Integer, nullable=False),
)

# What the registry knows about itself: "registry_id" (names its folder in the artifact
# store) and "artifacts" (where its artifact store is, recorded when it is created).
registry_info = sa.Table(
    "registry_info",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

experiments = sa.Table(
    "experiments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(_MAX_NAME), nullable=False),
    sa.Column("status", sa.String(64), nullable=False),
    sa.Column("created", sa.Double, nullable=False),
    sa.Column("config", sa.Text, nullable=False),
    sa.Column("package_versions", sa.Text, nullable=False),
    sa.Column("data_fingerprint", sa.Text, nullable=True),
    sa.Column("cluster", sa.Text, nullable=False),
    sa.UniqueConstraint("name", name="uq_experiments_name"),
    # Never reuse the id of a deleted row: trials and lineage refer to it.
    sqlite_autoincrement=True,
)

trials = sa.Table(
    "trials",
    metadata,
    sa.Column(
        "experiment_id",
        sa.Integer,
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("state", sa.String(64), nullable=False),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("scores", sa.Text, nullable=False),
    sa.Column("value", sa.Double, nullable=True),
    sa.Column("intermediate", sa.Text, nullable=False),
    sa.Column("started", sa.Double, nullable=True),
    sa.Column("finished", sa.Double, nullable=True),
    sa.Column("duration", sa.Double, nullable=True),
    sa.Column("worker", sa.Text, nullable=True),
    sa.Column("retries", sa.Integer, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("seed", sa.BigInteger, nullable=True),
    # The key is the unique (experiment_id, number) the upsert conflicts on.
    sa.PrimaryKeyConstraint("experiment_id", "number", name="pk_trials"),
    sa.Index("ix_trials_experiment_state", "experiment_id", "state"),
    sa.Index("ix_trials_experiment_value", "experiment_id", "value"),
)

models = sa.Table(
    "models",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(_MAX_NAME), nullable=False),
    sa.Column("created", sa.Double, nullable=False),
    # Highest version ever handed out; versions are never reused after a delete.
    sa.Column("last_version", sa.Integer, nullable=False),
    sa.UniqueConstraint("name", name="uq_models_name"),
    sqlite_autoincrement=True,
)

model_versions = sa.Table(
    "model_versions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "model_id", sa.Integer, sa.ForeignKey("models.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("artifact_uri", sa.Text, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("format", sa.String(64), nullable=False),
    sa.Column("metrics", sa.Text, nullable=False),
    sa.Column("signature", sa.Text, nullable=True),
    sa.Column("lineage", sa.Text, nullable=False),
    sa.Column("trusted_types", sa.Text, nullable=False),
    sa.Column("created", sa.Double, nullable=False),
    sa.UniqueConstraint("model_id", "version", name="uq_model_versions_model_version"),
    sa.Index("ix_model_versions_sha256", "sha256"),
    # Tags/aliases of a deleted version must not attach to a new row with the same id.
    sqlite_autoincrement=True,
)

aliases = sa.Table(
    "aliases",
    metadata,
    sa.Column(
        "model_id", sa.Integer, sa.ForeignKey("models.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("alias", sa.String(_MAX_NAME), nullable=False),
    sa.Column(
        "version_id",
        sa.Integer,
        sa.ForeignKey("model_versions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.PrimaryKeyConstraint("model_id", "alias", name="pk_aliases"),
    sa.Index("ix_aliases_version", "version_id"),
)

version_tags = sa.Table(
    "version_tags",
    metadata,
    sa.Column(
        "version_id",
        sa.Integer,
        sa.ForeignKey("model_versions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("key", sa.String(_MAX_NAME), nullable=False),
    sa.Column("value", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("version_id", "key", name="pk_version_tags"),
)

# Numeric metrics again, one row each, so that search can filter and sort in SQL.
version_metrics = sa.Table(
    "version_metrics",
    metadata,
    sa.Column(
        "version_id",
        sa.Integer,
        sa.ForeignKey("model_versions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("key", sa.String(_MAX_NAME), nullable=False),
    sa.Column("value", sa.Double, nullable=False),
    sa.PrimaryKeyConstraint("version_id", "key", name="pk_version_metrics"),
    sa.Index("ix_version_metrics_key_value", "key", "value"),
)

_TRIAL_COLUMNS = [c.name for c in trials.columns]
_TRIAL_UPDATE_COLUMNS = [n for n in _TRIAL_COLUMNS if n not in ("experiment_id", "number")]


def _trials_upsert_sqlite() -> Any:
    stmt = sqlite.insert(trials)
    return stmt.on_conflict_do_update(
        index_elements=[trials.c.experiment_id, trials.c.number],
        set_={name: stmt.excluded[name] for name in _TRIAL_UPDATE_COLUMNS},
    )


def _trials_upsert_postgresql() -> Any:
    """``INSERT INTO trials SELECT * FROM unnest(:a_col::type[], ...) ON CONFLICT ...``."""
    arrays = [sa.bindparam(f"a_{c.name}", type_=postgresql.ARRAY(c.type)) for c in trials.c]
    batch = sa.func.unnest(*arrays).table_valued(*_TRIAL_COLUMNS).render_derived(name="batch")
    stmt = postgresql.insert(trials).from_select(
        _TRIAL_COLUMNS, sa.select(*(batch.c[name] for name in _TRIAL_COLUMNS))
    )
    return stmt.on_conflict_do_update(
        index_elements=[trials.c.experiment_id, trials.c.number],
        set_={name: stmt.excluded[name] for name in _TRIAL_UPDATE_COLUMNS},
    )


_SQLITE_TRIALS_UPSERT = _trials_upsert_sqlite()
_PG_TRIALS_UPSERT = _trials_upsert_postgresql()


def _new_registry_id(conn: Connection) -> None:
    conn.execute(registry_info.insert().values(key="registry_id", value=uuid.uuid4().hex))


def _migrate_1_to_2(conn: Connection) -> None:
    """Version 2 adds ``registry_info`` and gives the registry its id."""
    registry_info.create(conn, checkfirst=True)
    _new_registry_id(conn)


# Schema upgrades: _MIGRATIONS[v] takes a database at version v to v + 1.
_MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _migrate_1_to_2}


def default_registry_url() -> str:
    """``$DMLSEARCH_REGISTRY``, or a SQLite file ``dmlsearch.db`` in the working directory."""
    return os.environ.get("DMLSEARCH_REGISTRY") or f"sqlite:///{Path.cwd() / 'dmlsearch.db'}"


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


def _float_or_none(x: Any) -> float | None:
    if x is None:
        return None
    value = float(x)
    # SQLite turns NaN into NULL while PostgreSQL sorts NaN above every number; store None.
    return None if math.isnan(value) else value


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
    """
    if isinstance(url, sa.URL):
        return url
    if not isinstance(url, str):
        raise InvalidParameterError(
            "url", f"expected a database URL (str), got {type(url).__name__} {url!r}"
        )
    try:
        return sa.make_url(url)
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


def sqlite_path(url: sa.URL) -> Path | None:
    """The file of a SQLite URL (None for other backends and in-memory databases)."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
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
        raise RegistryError(
            f"cannot open the registry at {shown}: its database driver is not installed "
            f"({exc}); for PostgreSQL install dmlsearch[postgres] and use postgresql+psycopg://"
        ) from None
    raise InvalidParameterError(
        "url",
        f"SQLStore supports sqlite:/// and postgresql+psycopg:// URLs, got {backend!r} ({shown})",
    )


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _one_line(exc: BaseException) -> str:
    """The driver's message of a database error, on one line."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


_SQLITE_UNAVAILABLE = ("locked", "busy", "unable to open", "disk i/o")


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


def _check_name(param: str, value: object, max_length: int = _MAX_NAME) -> None:
    # PostgreSQL would refuse an over-long VARCHAR where SQLite stores it: refuse it on both.
    check_text(param, value, "a name", max_length=max_length)


def _check_experiment_key(param: str, value: object) -> None:
    if isinstance(value, str):
        check_text(param, value, "an experiment name", max_length=_MAX_NAME)
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
    check_text("model", model, "a model name", max_length=_MAX_NAME, hint=hint)
    check_count("version", version, "a version number", minimum=1, maximum=INT32_MAX, optional=True)
    check_text("alias", alias, "an alias name", max_length=_MAX_NAME, optional=True)


def _check_paging(offset: object, limit: object) -> None:
    check_count("offset", offset, "an offset")
    check_count("limit", limit, "a page size", optional=True)


def _states(state: str | Sequence[str] | None) -> list[str] | None:
    if state is None:
        return None
    return [state] if isinstance(state, str) else list(state)


class SQLStore(RegistryStore):
    """Registry metadata in SQLite or PostgreSQL through SQLAlchemy Core.

    Parameters
    ----------
    url : str or sqlalchemy.URL, optional
        ``sqlite:///path/to/file.db`` (parent folders are created), ``sqlite://`` for a
        private in-memory database, or ``postgresql+psycopg://user@host/db``. Default:
        :func:`default_registry_url`.
    migrate : bool
        Create or upgrade the schema on open (safe when several processes open at once).
    create : bool
        With False, a database without the registry's tables (or a SQLite file that does
        not exist) is refused with RegistryError instead of created: what reading commands
        use. An older schema is still upgraded.
    max_retries : int
        Attempts at a model version before giving up (a unique-constraint race).
    busy_timeout : float
        Seconds a SQLite write waits for another writer's lock before raising
        RegistryUnavailableError (default 30).
    **engine_kwargs
        Passed to :func:`sqlalchemy.create_engine` (``pool_size``, ``echo``...).

    Raises RegistryError (one line, naming the URL) for a malformed URL, a missing driver,
    a database that does not exist or cannot be reached, and with ``create=False`` an
    empty database. Database errors that mean "unavailable for now" (connection lost, a
    lock held past the timeout) surface as RegistryUnavailableError from every method.

    The object is thread-safe: each call checks a connection out of the engine's pool.
    """

    def __init__(
        self,
        url: str | sa.URL | None = None,
        *,
        migrate: bool = True,
        create: bool = True,
        max_retries: int = 10,
        busy_timeout: float = _SQLITE_BUSY_TIMEOUT_S,
        **engine_kwargs: Any,
    ) -> None:
        if max_retries < 1:
            raise InvalidParameterError("max_retries", f"must be >= 1, got {max_retries}")
        if not busy_timeout >= 0:
            raise InvalidParameterError("busy_timeout", f"must be >= 0, got {busy_timeout}")
        self.url = parse_registry_url(url if url is not None else default_registry_url())
        self.max_retries = max_retries
        self._engine, memory = _make_engine(
            self.url, engine_kwargs, busy_timeout=busy_timeout, create=create
        )
        self._dialect = self._engine.dialect.name
        # An in-memory database is one shared connection: serialize its users.
        self._memory_lock = threading.RLock() if memory else None
        self._pg_binary_upsert: str | None = None
        if self._dialect == "postgresql" and self._engine.dialect.driver == "psycopg":
            # psycopg's %b placeholders send the arrays in binary, which skips escaping every
            # text element (measured: 12k vs 7k trials/s).
            compiled = str(_PG_TRIALS_UPSERT.compile(dialect=self._engine.dialect))
            self._pg_binary_upsert = re.sub(r"%\((a_\w+)\)s", r"%(\1)b", compiled)
        if migrate:
            try:
                self.migrate(create=create)
            except RegistryUnavailableError as exc:
                self._engine.dispose()
                raise self._open_error(exc.__cause__ or exc) from None
            except BaseException:
                self._engine.dispose()
                raise

    def _open_error(self, exc: BaseException) -> RegistryError:
        """A one-line error for a database that could not be opened, with what to check."""
        message = _one_line(exc)
        if self._dialect == "postgresql" and "does not exist" in message:
            hint = (
                f"create it (createdb {self.url.database} or CREATE DATABASE "
                f"{self.url.database}) or fix the URL"
            )
        elif self._dialect == "postgresql":
            hint = "check that the server is running and that the URL is right"
        else:
            hint = "check the path and its permissions"
        return RegistryError(f"cannot open the registry at {self.shown_url}: {message}; {hint}")

    @property
    def shown_url(self) -> str:
        """The URL with its password hidden (what messages show)."""
        return self.url.render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"SQLStore({self.shown_url!r})"

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tools and tests; prefer the store's methods)."""
        return self._engine

    # -- plumbing --------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Connection]:
        """One transaction; commits on success, rolls back on any exception.

        An error that means the database is unavailable for now becomes
        RegistryUnavailableError (naming the URL).
        """
        guard: AbstractContextManager[Any] = (
            self._memory_lock if self._memory_lock is not None else nullcontext()
        )
        try:
            with guard, self._engine.connect() as conn:
                if write:
                    conn.execution_options(**{_WRITE_OPTION: True})
                with conn.begin():
                    yield conn
        except sa.exc.SQLAlchemyError as exc:
            if _is_unavailable(exc, self._dialect):
                raise RegistryUnavailableError(
                    f"the registry at {self.shown_url} is unavailable: {_one_line(exc)}"
                ) from exc
            raise

    def _insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT, which has ``on_conflict_do_update``/``do_nothing``."""
        if self._dialect == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    def migrate(self, *, create: bool = True) -> int:
        """Create the tables, or upgrade them, to :data:`SCHEMA_VERSION`; return it.

        Raises RegistryError if the database was written by a newer dmlsearch, or (with
        ``create=False``) if it has no registry tables at all.
        """
        with self._transaction(write=True) as conn:
            if self._dialect == "postgresql":
                # Concurrent CREATE TABLEs race on the catalog; take turns (released at commit).
                conn.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY}
                )
            # On SQLite BEGIN IMMEDIATE already serializes openers.
            current = None
            if sa.inspect(conn).has_table(schema_info.name):
                current = conn.execute(sa.select(sa.func.max(schema_info.c.version))).scalar()
            if current is not None and current > SCHEMA_VERSION:
                raise RegistryError(
                    f"the registry at {self!r} has schema version {current}, newer than this "
                    f"dmlsearch understands ({SCHEMA_VERSION}); upgrade dmlsearch"
                )
            if current is None and not create:
                raise RegistryError(
                    f"no registry at {self.shown_url}: the database has no dmlsearch tables "
                    "(reading never creates a registry; run an experiment first, or check "
                    "the URL)"
                )
            if current is None:
                metadata.create_all(conn, checkfirst=True)
                conn.execute(schema_info.insert().values(version=SCHEMA_VERSION))
                _new_registry_id(conn)
            elif current < SCHEMA_VERSION:
                for version in range(current, SCHEMA_VERSION):
                    _MIGRATIONS[version](conn)
                conn.execute(schema_info.update().values(version=SCHEMA_VERSION))
        return SCHEMA_VERSION

    def schema_version(self) -> int | None:
        """The schema version recorded in the database (None before :meth:`migrate`)."""
        with self._transaction(write=False) as conn:
            if not sa.inspect(conn).has_table("schema_info"):
                return None
            value = conn.execute(sa.select(sa.func.max(schema_info.c.version))).scalar()
            return None if value is None else int(value)

    def close(self) -> None:
        self._engine.dispose()

    # -- registry metadata -----------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        _check_name("key", key, 64)
        with self._transaction(write=False) as conn:
            # A database opened without migrating may predate the table.
            if not sa.inspect(conn).has_table(registry_info.name):
                return None
            value = conn.execute(
                sa.select(registry_info.c.value).where(registry_info.c.key == key)
            ).scalar()
        return None if value is None else str(value)

    def setdefault_meta(self, key: str, value: str) -> str:
        _check_name("key", key, 64)
        if not isinstance(value, str):
            raise InvalidParameterError("value", f"must be a string, got {value!r}")
        with self._transaction(write=True) as conn:
            if not sa.inspect(conn).has_table(registry_info.name):
                raise RegistryError(
                    f"the registry at {self.shown_url} has schema version "
                    f"{self._current_version(conn)}; open it with migrate=True to upgrade it"
                )
            conn.execute(
                self._insert(registry_info)
                .values(key=key, value=value)
                .on_conflict_do_nothing(index_elements=[registry_info.c.key])
            )
            return str(
                conn.execute(
                    sa.select(registry_info.c.value).where(registry_info.c.key == key)
                ).scalar_one()
            )

    @staticmethod
    def _current_version(conn: Connection) -> int | None:
        if not sa.inspect(conn).has_table(schema_info.name):
            return None
        value = conn.execute(sa.select(sa.func.max(schema_info.c.version))).scalar()
        return None if value is None else int(value)

    # -- experiments -----------------------------------------------------------------------

    @staticmethod
    def _experiment(row: sa.Row[Any]) -> ExperimentRecord:
        return ExperimentRecord(
            id=row.id,
            name=row.name,
            status=row.status,
            created=row.created,
            config=_loads(row.config),
            package_versions=_loads(row.package_versions),
            data_fingerprint=row.data_fingerprint,
            cluster=_loads(row.cluster),
        )

    def create_experiment(
        self,
        name: str,
        *,
        config: Mapping[str, Any] | None = None,
        package_versions: Mapping[str, Any] | None = None,
        data_fingerprint: str | None = None,
        cluster: Mapping[str, Any] | None = None,
    ) -> ExperimentRecord:
        _check_name("name", name)
        check_text("data_fingerprint", data_fingerprint, "a data fingerprint", optional=True)
        values = {
            "name": name,
            "status": RUNNING,
            "created": now(),
            "config": _dumps(dict(config or {})),
            "package_versions": _dumps(dict(package_versions or {})),
            "data_fingerprint": data_fingerprint,
            "cluster": _dumps(dict(cluster or {})),
        }
        try:
            with self._transaction(write=True) as conn:
                row = conn.execute(
                    experiments.insert().values(**values).returning(*experiments.c)
                ).one()
        except IntegrityError as exc:
            raise AlreadyExistsError(f"an experiment named {name!r} already exists") from exc
        return self._experiment(row)

    def get_experiment(self, name_or_id: str | int) -> ExperimentRecord:
        _check_experiment_key("name_or_id", name_or_id)
        column = experiments.c.name if isinstance(name_or_id, str) else experiments.c.id
        with self._transaction(write=False) as conn:
            row = conn.execute(sa.select(experiments).where(column == name_or_id)).one_or_none()
        if row is None:
            raise NotFoundError(f"no experiment {name_or_id!r}")
        return self._experiment(row)

    def list_experiments(self) -> list[ExperimentRecord]:
        with self._transaction(write=False) as conn:
            rows = conn.execute(sa.select(experiments).order_by(experiments.c.id)).all()
        return [self._experiment(r) for r in rows]

    def set_experiment_status(self, experiment_id: int, status: str) -> None:
        with self._transaction(write=True) as conn:
            result = conn.execute(
                experiments.update().where(experiments.c.id == experiment_id).values(status=status)
            )
            if result.rowcount == 0:
                raise NotFoundError(f"no experiment with id {experiment_id!r}")

    def set_experiment_config(self, experiment_id: int, config: Mapping[str, Any]) -> None:
        check_mapping("config", config, "the experiment's config", optional=False)
        with self._transaction(write=True) as conn:
            result = conn.execute(
                experiments.update()
                .where(experiments.c.id == experiment_id)
                .values(config=_dumps(dict(config)))
            )
            if result.rowcount == 0:
                raise NotFoundError(f"no experiment with id {experiment_id!r}")

    def delete_experiment(self, name_or_id: str | int) -> int:
        _check_experiment_key("name_or_id", name_or_id)
        column = experiments.c.name if isinstance(name_or_id, str) else experiments.c.id
        with self._transaction(write=True) as conn:
            experiment_id = conn.execute(
                sa.select(experiments.c.id).where(column == name_or_id)
            ).scalar()
            if experiment_id is None:
                raise NotFoundError(f"no experiment {name_or_id!r}")
            # Explicit, rather than relying on ON DELETE CASCADE being enforced.
            n_trials = conn.execute(
                trials.delete().where(trials.c.experiment_id == experiment_id)
            ).rowcount
            conn.execute(experiments.delete().where(experiments.c.id == experiment_id))
        return int(n_trials)

    @staticmethod
    def _require_experiment(conn: Connection, experiment_id: int) -> None:
        found = conn.execute(
            sa.select(experiments.c.id).where(experiments.c.id == experiment_id)
        ).first()
        if found is None:
            raise NotFoundError(f"no experiment with id {experiment_id!r}")

    # -- trials ----------------------------------------------------------------------------

    @staticmethod
    def _trial_row(t: TrialRecord) -> dict[str, Any]:
        return {
            "experiment_id": int(t.experiment_id),
            "number": int(t.number),
            "state": str(t.state),
            "params": _dumps(t.params),
            "scores": _dumps(t.scores),
            "value": _float_or_none(t.value),
            "intermediate": _dumps(t.intermediate or {}),
            "started": _float_or_none(t.started),
            "finished": _float_or_none(t.finished),
            "duration": _float_or_none(t.duration),
            "worker": t.worker,
            "retries": int(t.retries),
            "error": t.error,
            "seed": None if t.seed is None else int(t.seed),
        }

    @staticmethod
    def _trial(row: sa.Row[Any]) -> TrialRecord:
        return TrialRecord(
            experiment_id=row.experiment_id,
            number=row.number,
            state=row.state,
            params=_loads(row.params),
            scores=_loads(row.scores),
            value=_float_or_none(row.value),
            intermediate=_loads(row.intermediate),
            started=row.started,
            finished=row.finished,
            duration=row.duration,
            worker=row.worker,
            retries=row.retries,
            error=row.error,
            seed=row.seed,
        )

    def record_trials(self, experiment_id: int, trials: Sequence[TrialRecord]) -> None:
        by_number: dict[int, dict[str, Any]] = {}
        for t in trials:
            if t.experiment_id != experiment_id:
                raise InvalidParameterError(
                    "trials",
                    f"trial {t.number} belongs to experiment {t.experiment_id}, "
                    f"not {experiment_id}",
                )
            # A key twice in one upsert is an error on PostgreSQL; the last record wins.
            by_number[int(t.number)] = self._trial_row(t)
        # Key order keeps concurrent overlapping upserts from deadlocking on PostgreSQL.
        rows = [by_number[n] for n in sorted(by_number)]
        with self._transaction(write=True) as conn:
            self._require_experiment(conn, experiment_id)
            if not rows:
                return
            if self._dialect == "postgresql":
                # One statement per chunk: the columns travel as arrays and are unnested on
                # the server (executemany would run one INSERT per trial there).
                for chunk in _chunks(rows, _PG_TRIAL_CHUNK):
                    arrays = {f"a_{name}": [r[name] for r in chunk] for name in _TRIAL_COLUMNS}
                    if self._pg_binary_upsert is not None:
                        conn.exec_driver_sql(self._pg_binary_upsert, arrays)
                    else:
                        conn.execute(_PG_TRIALS_UPSERT, arrays)
            else:
                # One executemany of a cached statement: SQLite runs it in-process, and
                # compiling a multi-row VALUES clause would cost more than the inserts.
                conn.execute(_SQLITE_TRIALS_UPSERT, rows)

    @staticmethod
    def _trial_filter(experiment_id: int, state: str | Sequence[str] | None) -> list[Any]:
        check_states("state", state)
        where: list[Any] = [trials.c.experiment_id == experiment_id]
        states = _states(state)
        if states is not None:
            where.append(trials.c.state.in_(states))
        return where

    def get_trials(
        self,
        experiment_id: int,
        *,
        state: str | Sequence[str] | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[TrialRecord]:
        _check_paging(offset, limit)
        query = (
            sa.select(trials)
            .where(*self._trial_filter(experiment_id, state))
            .order_by(trials.c.number)
            .offset(offset)
            .limit(limit)
        )
        with self._transaction(write=False) as conn:
            self._require_experiment(conn, experiment_id)
            rows = conn.execute(query).all()
        return [self._trial(r) for r in rows]

    def count_trials(self, experiment_id: int, state: str | Sequence[str] | None = None) -> int:
        query = (
            sa.select(sa.func.count())
            .select_from(trials)
            .where(*self._trial_filter(experiment_id, state))
        )
        with self._transaction(write=False) as conn:
            self._require_experiment(conn, experiment_id)
            return int(conn.execute(query).scalar_one())

    def experiment_summaries(self) -> dict[int, tuple[int, float | None]]:
        # NaN values are stored as NULL, which MAX skips: the best is the leaderboard's top.
        best = sa.func.max(sa.case((trials.c.state == COMPLETE, trials.c.value)))
        query = sa.select(trials.c.experiment_id, sa.func.count(), best).group_by(
            trials.c.experiment_id
        )
        with self._transaction(write=False) as conn:
            ids = conn.execute(sa.select(experiments.c.id)).scalars().all()
            rows = conn.execute(query).all()
        out: dict[int, tuple[int, float | None]] = {int(i): (0, None) for i in ids}
        for exp_id, count, best in rows:
            out[int(exp_id)] = (int(count), _float_or_none(best))
        return out

    def leaderboard(self, experiment_id: int, k: int = 10) -> list[TrialRecord]:
        check_count("k", k, "a number of trials")
        query = (
            sa.select(trials)
            .where(
                trials.c.experiment_id == experiment_id,
                trials.c.state == COMPLETE,
                trials.c.value.is_not(None),
            )
            .order_by(trials.c.value.desc(), trials.c.number)
            .limit(k)
        )
        with self._transaction(write=False) as conn:
            self._require_experiment(conn, experiment_id)
            rows = conn.execute(query).all()
        return [self._trial(r) for r in rows]

    # -- models ----------------------------------------------------------------------------

    @staticmethod
    def _model_id(conn: Connection, model: str) -> int:
        _check_model_args(model)
        model_id = conn.execute(sa.select(models.c.id).where(models.c.name == model)).scalar()
        if model_id is None:
            raise NotFoundError(f"no model {model!r}")
        return int(model_id)

    @staticmethod
    def _version_id(conn: Connection, model: str, version: int) -> int:
        _check_model_args(model, version)
        version_id = conn.execute(
            sa.select(model_versions.c.id)
            .join(models, models.c.id == model_versions.c.model_id)
            .where(models.c.name == model, model_versions.c.version == version)
        ).scalar()
        if version_id is None:
            raise NotFoundError(f"no version {version!r} of model {model!r}")
        return int(version_id)

    @staticmethod
    def _version_query() -> sa.Select[Any]:
        return sa.select(model_versions, models.c.name.label("model_name")).join(
            models, models.c.id == model_versions.c.model_id
        )

    @staticmethod
    def _versions(conn: Connection, rows: Sequence[sa.Row[Any]]) -> list[ModelVersionRecord]:
        """Records for version rows, with their tags and aliases (two queries per chunk)."""
        tags: dict[int, dict[str, str]] = {}
        names: dict[int, list[str]] = {}
        ids = [r.id for r in rows]
        for chunk in _chunks(ids, _IN_CHUNK):
            for tag in conn.execute(
                sa.select(version_tags).where(version_tags.c.version_id.in_(chunk))
            ):
                tags.setdefault(tag.version_id, {})[tag.key] = tag.value
            for alias in conn.execute(
                sa.select(aliases.c.version_id, aliases.c.alias).where(
                    aliases.c.version_id.in_(chunk)
                )
            ):
                names.setdefault(alias.version_id, []).append(alias.alias)
        return [
            ModelVersionRecord(
                model=r.model_name,
                version=r.version,
                artifact_uri=r.artifact_uri,
                sha256=r.sha256,
                format=r.format,
                metrics=_loads(r.metrics),
                signature=_loads(r.signature),
                lineage=_loads(r.lineage),
                trusted_types=_loads(r.trusted_types),
                tags=dict(sorted(tags.get(r.id, {}).items())),
                aliases=sorted(names.get(r.id, [])),
                created=r.created,
            )
            for r in rows
        ]

    def _ensure_model(self, conn: Connection, model: str) -> int:
        # DO NOTHING makes two processes registering the same new model both succeed.
        conn.execute(
            self._insert(models)
            .values(name=model, created=now(), last_version=0)
            .on_conflict_do_nothing(index_elements=[models.c.name])
        )
        return self._model_id(conn, model)

    def create_model_version(
        self,
        model: str,
        *,
        artifact_uri: str,
        sha256: str,
        format: str,
        metrics: Mapping[str, Any] | None = None,
        signature: Mapping[str, Any] | None = None,
        lineage: Mapping[str, Any] | None = None,
        trusted_types: Sequence[str] = (),
    ) -> ModelVersionRecord:
        _check_name("model", model)
        _check_name("format", format, 64)
        check_mapping("metrics", metrics, "metrics")
        for key in metrics or {}:
            _check_name("metrics", key)  # numeric ones are rows keyed by name
        if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            raise InvalidParameterError(
                "sha256", f"must be 64 lowercase hex digits, got {sha256!r}"
            )
        metrics = dict(metrics or {})
        values = {
            "artifact_uri": artifact_uri,
            "sha256": sha256,
            "format": format,
            "metrics": _dumps(metrics),
            "signature": None if signature is None else _dumps(dict(signature)),
            "lineage": _dumps(dict(lineage or {})),
            "trusted_types": _dumps(list(trusted_types)),
        }
        numeric = [
            {"key": key, "value": float(value)}
            for key, value in metrics.items()
            if isinstance(value, (int, float))
            and not isinstance(value, bool)
            and not math.isnan(value)
        ]
        last_error: IntegrityError | None = None
        for attempt in range(self.max_retries):
            try:
                with self._transaction(write=True) as conn:
                    model_id = self._ensure_model(conn, model)
                    # The UPDATE row-locks the model on PostgreSQL, so concurrent writers
                    # take numbers in turn; the unique constraint below is the guarantee.
                    version = conn.execute(
                        models.update()
                        .where(models.c.id == model_id)
                        .values(last_version=models.c.last_version + 1)
                        .returning(models.c.last_version)
                    ).scalar_one()
                    version_id = conn.execute(
                        model_versions.insert()
                        .values(model_id=model_id, version=version, created=now(), **values)
                        .returning(model_versions.c.id)
                    ).scalar_one()
                    if numeric:
                        conn.execute(
                            version_metrics.insert(),
                            [{"version_id": version_id, **m} for m in numeric],
                        )
                    row = conn.execute(
                        self._version_query().where(model_versions.c.id == version_id)
                    ).one()
                    return self._versions(conn, [row])[0]
            except IntegrityError as exc:
                last_error = exc
                # Jittered backoff so that colliding writers do not collide again.
                time.sleep(random.uniform(0, 0.01 * 2**attempt))
        raise RegistryError(
            f"could not register a version of {model!r} after {self.max_retries} attempts"
        ) from last_error

    def get_model_version(
        self, model: str, version: int | None = None, alias: str | None = None
    ) -> ModelVersionRecord:
        _check_model_args(model, version, alias)
        if version is not None and alias is not None:
            raise InvalidParameterError(
                "alias", f"give a version or an alias, not both ({version!r}, {alias!r})"
            )
        query = self._version_query().where(models.c.name == model)
        if alias is not None:
            query = query.join(aliases, aliases.c.version_id == model_versions.c.id).where(
                aliases.c.alias == alias
            )
            missing = f"no alias {alias!r} of model {model!r}"
        elif version is not None:
            query = query.where(model_versions.c.version == version)
            missing = f"no version {version!r} of model {model!r}"
        else:
            query = query.order_by(model_versions.c.version.desc()).limit(1)
            missing = f"model {model!r} has no versions"
        with self._transaction(write=False) as conn:
            row = conn.execute(query).first()
            if row is None:
                self._model_id(conn, model)  # NotFoundError naming the model if it is missing
                raise NotFoundError(missing)
            return self._versions(conn, [row])[0]

    def list_model_versions(self, model: str) -> list[ModelVersionRecord]:
        with self._transaction(write=False) as conn:
            model_id = self._model_id(conn, model)
            rows = conn.execute(
                self._version_query()
                .where(model_versions.c.model_id == model_id)
                .order_by(model_versions.c.version)
            ).all()
            return self._versions(conn, rows)

    def list_models(self) -> list[str]:
        with self._transaction(write=False) as conn:
            return list(conn.execute(sa.select(models.c.name).order_by(models.c.name)).scalars())

    def model_summaries(self) -> list[ModelSummary]:
        per_model = (
            sa.select(
                model_versions.c.model_id,
                sa.func.max(model_versions.c.version).label("latest"),
                sa.func.count().label("n"),
                sa.func.max(model_versions.c.created).label("updated"),
            )
            .group_by(model_versions.c.model_id)
            .subquery()
        )
        query = (
            sa.select(models.c.id, models.c.name, models.c.created, per_model)
            .outerjoin(per_model, per_model.c.model_id == models.c.id)
            .order_by(models.c.name)
        )
        alias_query = sa.select(aliases.c.model_id, aliases.c.alias, model_versions.c.version).join(
            model_versions, model_versions.c.id == aliases.c.version_id
        )
        with self._transaction(write=False) as conn:
            rows = conn.execute(query).all()
            found: dict[int, dict[str, int]] = {}
            for model_id, alias, version in conn.execute(alias_query):
                found.setdefault(int(model_id), {})[alias] = int(version)
        return [
            ModelSummary(
                name=r.name,
                latest_version=None if r.latest is None else int(r.latest),
                n_versions=int(r.n or 0),
                aliases=dict(sorted(found.get(int(r.id), {}).items())),
                created=float(r.created),
                updated=None if r.updated is None else float(r.updated),
            )
            for r in rows
        ]

    def search_model_versions(
        self,
        *,
        model: str | None = None,
        tag: tuple[str, str] | None = None,
        metric: str | None = None,
        min_value: float | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[ModelVersionRecord]:
        _check_paging(offset, limit)
        if model is not None:
            _check_model_args(model)
        if tag is not None and not (
            isinstance(tag, tuple) and len(tag) == 2 and all(isinstance(t, str) for t in tag)
        ):
            raise InvalidParameterError(
                "tag", f"expected a (key, value) pair of strings, got {tag!r}"
            )
        if tag is not None:
            _check_name("tag", tag[0])
            check_text("tag", tag[1], "a tag value")
        if metric is not None:
            _check_name("metric", metric)
        check_number("min_value", min_value, "a metric value", optional=True)
        if min_value is not None and metric is None:
            raise InvalidParameterError("min_value", "needs `metric` to say which metric")
        query = self._version_query()
        if model is not None:
            query = query.where(models.c.name == model)
        if tag is not None:
            key, value = tag
            query = query.where(
                sa.exists().where(
                    version_tags.c.version_id == model_versions.c.id,
                    version_tags.c.key == key,
                    version_tags.c.value == value,
                )
            )
        if metric is not None:
            query = query.join(
                version_metrics,
                sa.and_(
                    version_metrics.c.version_id == model_versions.c.id,
                    version_metrics.c.key == metric,
                ),
            )
            if min_value is not None:
                query = query.where(version_metrics.c.value >= float(min_value))
            query = query.order_by(
                version_metrics.c.value.desc(), models.c.name, model_versions.c.version
            )
        else:
            query = query.order_by(models.c.name, model_versions.c.version)
        query = query.offset(offset).limit(limit)
        with self._transaction(write=False) as conn:
            return self._versions(conn, conn.execute(query).all())

    def set_alias(self, model: str, alias: str, version: int) -> None:
        _check_model_args(model, version, alias)
        with self._transaction(write=True) as conn:
            model_id = self._model_id(conn, model)
            version_id = self._version_id(conn, model, version)
            stmt = self._insert(aliases).values(
                model_id=model_id, alias=alias, version_id=version_id
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[aliases.c.model_id, aliases.c.alias],
                    set_={"version_id": stmt.excluded.version_id},
                )
            )

    def delete_alias(self, model: str, alias: str) -> None:
        _check_model_args(model, alias=alias)
        with self._transaction(write=True) as conn:
            model_id = self._model_id(conn, model)
            result = conn.execute(
                aliases.delete().where(aliases.c.model_id == model_id, aliases.c.alias == alias)
            )
            if result.rowcount == 0:
                raise NotFoundError(f"no alias {alias!r} of model {model!r}")

    def set_tag(self, model: str, version: int, key: str, value: str) -> None:
        _check_model_args(model, version)
        _check_name("key", key)
        check_text("value", str(value), "a tag value")
        with self._transaction(write=True) as conn:
            version_id = self._version_id(conn, model, version)
            stmt = self._insert(version_tags).values(
                version_id=version_id, key=key, value=str(value)
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[version_tags.c.version_id, version_tags.c.key],
                    set_={"value": stmt.excluded.value},
                )
            )

    def delete_tag(self, model: str, version: int, key: str) -> None:
        _check_model_args(model, version)
        _check_name("key", key)
        with self._transaction(write=True) as conn:
            version_id = self._version_id(conn, model, version)
            result = conn.execute(
                version_tags.delete().where(
                    version_tags.c.version_id == version_id, version_tags.c.key == key
                )
            )
            if result.rowcount == 0:
                raise NotFoundError(f"no tag {key!r} on version {version} of model {model!r}")

    def delete_model_version(self, model: str, version: int) -> None:
        _check_model_args(model, version)
        with self._transaction(write=True) as conn:
            version_id = self._version_id(conn, model, version)
            # Explicit deletes rather than relying on ON DELETE CASCADE being enforced.
            for table in (aliases, version_tags, version_metrics):
                conn.execute(table.delete().where(table.c.version_id == version_id))
            conn.execute(model_versions.delete().where(model_versions.c.id == version_id))

    def referenced_artifacts(self) -> set[str]:
        with self._transaction(write=False) as conn:
            shas = set(conn.execute(sa.select(model_versions.c.sha256).distinct()).scalars())
            # Only a training job's config records a checkpoint; LIKE spares parsing the rest.
            configs = conn.execute(
                sa.select(experiments.c.config).where(experiments.c.config.like('%"checkpoint"%'))
            ).scalars()
            for text in configs:
                checkpoint = _loads(text).get("checkpoint")
                if isinstance(checkpoint, dict) and isinstance(checkpoint.get("sha256"), str):
                    shas.add(checkpoint["sha256"])
        return shas
