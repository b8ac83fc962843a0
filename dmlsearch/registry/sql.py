"""``SQLStore``: the registry's metadata in SQLite (default) or PostgreSQL (at scale).

SQLAlchemy Core only. JSON-valued fields are TEXT written with ``json.dumps`` so that both
backends store the same bytes. Writes on SQLite take the database lock up front
(``BEGIN IMMEDIATE``) under WAL with a 30 s busy timeout: a deferred transaction that reads
and then writes cannot wait for the lock and fails with "database is locked" instead.

This module puts the store together and is where its names are imported from; the parts
live beside it: ``_sql_schema`` (tables, migrations), ``_sql_engine`` (URLs, engines,
SQLite pragmas, unavailable-error classification), ``_sql_values`` (JSON columns, argument
checks), ``_sql_core`` (transactions, migration, registry metadata), ``_sql_runs``
(experiments, trials) and ``_sql_models`` (model versions, aliases, tags).
"""

from __future__ import annotations

# Names other modules import from here; ``X as X`` marks them as re-exported.
from ._sql_engine import default_registry_url as default_registry_url
from ._sql_engine import parse_registry_url as parse_registry_url
from ._sql_engine import sqlite_path as sqlite_path
from ._sql_models import _ModelsMixin
from ._sql_runs import _RunsMixin
from ._sql_schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._sql_schema import metadata as metadata
from ._sql_values import _dumps as _dumps
from ._sql_values import _loads as _loads

__all__ = ["SCHEMA_VERSION", "SQLStore", "default_registry_url"]


class SQLStore(_RunsMixin, _ModelsMixin):
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
    a database that does not exist or cannot be reached, a database holding another
    application's table under one of dmlsearch's table names, and with ``create=False`` an
    empty database. A write to a read-only database (a replica) raises RegistryError
    saying so; reads work. Database errors that mean "unavailable for now" (connection lost, a
    lock held past the timeout) surface as RegistryUnavailableError from every method.

    The object is thread-safe: each call checks a connection out of the engine's pool.
    """
