"""The core of ``SQLStore``: opening the database, transactions, migration, registry metadata.

The experiment/trial and model parts (``_sql_runs``, ``_sql_models``) build on this class;
``sql.SQLStore`` puts them together.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from ..exceptions import InvalidParameterError
from ._base import (
    NotFoundError,
    RegistryError,
    RegistryOpenError,
    RegistryStore,
    RegistryUnavailableError,
)
from ._sql_engine import (
    _SQLITE_BUSY_TIMEOUT_S,
    _WRITE_OPTION,
    _is_foreign_key_violation,
    _is_read_only,
    _is_unavailable,
    _make_engine,
    _one_line,
    _postgres_open_hint,
    default_registry_url,
    parse_registry_url,
)
from ._sql_schema import (
    _MIGRATION_LOCK_KEY,
    _MIGRATIONS,
    _PG_TRIALS_UPSERT,
    SCHEMA_VERSION,
    _new_registry_id,
    foreign_tables,
    metadata,
    registry_info,
    schema_info,
)
from ._sql_values import _check_name


class _SQLCore(RegistryStore):
    """Engine, transactions, schema and registry metadata of a ``SQLStore`` (see there)."""

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
            except sa.exc.DatabaseError as exc:  # e.g. a file that is not a SQLite database
                self._engine.dispose()
                raise self._open_error(exc) from None
            except BaseException:
                self._engine.dispose()
                raise

    def _open_error(self, exc: BaseException) -> RegistryOpenError:
        """A one-line error for a database that could not be opened, with what to check."""
        message = _one_line(exc)
        if self._dialect == "postgresql":
            hint = _postgres_open_hint(exc, message, self.url)
        elif "not a database" in message:
            hint = "check that the URL names the registry's SQLite file"
        else:
            hint = "check the path and its permissions"
        return RegistryOpenError(f"cannot open the registry at {self.shown_url}: {message}; {hint}")

    def _foreign_tables_error(self, foreign: dict[str, str]) -> RegistryOpenError:
        """Refusal of a database whose tables of dmlsearch's names are another application's."""
        listed = "; ".join(f"{name} {how}" for name, how in foreign.items())
        if self._dialect == "postgresql":
            where = (
                "another database, or another schema of this one (CREATE SCHEMA <schema>, "
                "then add ?options=-csearch_path%3D<schema> to the URL)"
            )
        else:
            where = "another SQLite file"
        tables = f"table {next(iter(foreign))} is" if len(foreign) == 1 else "tables are"
        return RegistryOpenError(
            f"cannot open the registry at {self.shown_url}: the database's {tables} not "
            f"dmlsearch's although named as its own ({listed}); use {where}; nothing was "
            "created"
        )

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
    def _transaction(self, *, write: bool, vanished: str | None = None) -> Iterator[Connection]:
        """One transaction; commits on success, rolls back on any exception.

        An error that means the database is unavailable for now becomes
        RegistryUnavailableError (naming the URL); a write to a read-only database a
        RegistryError saying so. With ``vanished``, a row that refers to one deleted
        meanwhile (a foreign-key violation) is NotFoundError(vanished): on PostgreSQL
        another transaction can delete what this one checked before inserting.
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
            if _is_read_only(exc):
                raise self._read_only_error(exc) from exc
            if vanished is not None and _is_foreign_key_violation(exc):
                raise NotFoundError(vanished) from exc
            raise

    def _read_only_error(self, exc: BaseException) -> RegistryError:
        if self._dialect == "postgresql":
            hint = (
                "connect to the primary server rather than a replica, or turn "
                "default_transaction_read_only off"
            )
        else:
            hint = "open it without mode=ro, from an account that may write the file and its folder"
        return RegistryError(
            f"the registry at {self.shown_url} is read-only ({_one_line(exc)}): it can be "
            f"read but not written; to write to it, {hint}"
        )

    def _insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT, which has ``on_conflict_do_update``/``do_nothing``."""
        if self._dialect == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    def migrate(self, *, create: bool = True) -> int:
        """Create the tables, or upgrade them, to :data:`SCHEMA_VERSION`; return it.

        Raises RegistryError if the database was written by a newer dmlsearch, or (with
        ``create=False``) if it has no registry tables at all; RegistryOpenError, creating
        nothing, if a table of dmlsearch's names has another layout (another application's).
        """
        with self._transaction(write=True) as conn:
            if self._dialect == "postgresql":
                # Concurrent CREATE TABLEs race on the catalog; take turns (released at commit).
                conn.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY}
                )
            # On SQLite BEGIN IMMEDIATE already serializes openers.
            foreign = foreign_tables(conn)
            if foreign:
                raise self._foreign_tables_error(foreign)
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
