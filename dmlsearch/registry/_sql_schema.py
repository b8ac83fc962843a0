"""The registry's tables and schema migrations (SQLAlchemy Core, one schema for both backends).

Separate from the store so that what the database holds, and how an older database is
upgraded, can be read in one place without the queries around it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from ._checks import MAX_NAME

SCHEMA_VERSION = 2

# Key of the PostgreSQL advisory lock that serializes schema creation/migration.
_MIGRATION_LOCK_KEY = 0x646D6C73  # "dmls"

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
    sa.Column("name", sa.String(MAX_NAME), nullable=False),
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
    sa.Column("name", sa.String(MAX_NAME), nullable=False),
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
    sa.Column("alias", sa.String(MAX_NAME), nullable=False),
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
    sa.Column("key", sa.String(MAX_NAME), nullable=False),
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
    sa.Column("key", sa.String(MAX_NAME), nullable=False),
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


def foreign_tables(conn: Connection) -> dict[str, str]:
    """The tables of dmlsearch's names that the database holds with another layout.

    Maps each to what differs: a column it lacks, or one that dmlsearch would not fill and
    the table requires. Another application's ``models`` table was otherwise taken as
    dmlsearch's: the other tables were created around it and later calls failed.
    """
    found = sa.inspect(conn).get_multi_columns(filter_names=list(metadata.tables))
    out: dict[str, str] = {}
    for (_schema, name), columns in sorted(found.items()):
        ours = metadata.tables[name].c
        have = {column["name"] for column in columns}
        missing = [column.name for column in ours if column.name not in have]
        required = [
            column["name"]
            for column in columns
            if column["name"] not in ours
            and not column["nullable"]
            and column.get("default") is None
            and not column.get("identity")
            and not column.get("autoincrement")
        ]
        if missing:
            out[name] = f"has no column {', '.join(missing)}"
        elif required:
            out[name] = f"requires column {', '.join(required)}, which dmlsearch does not fill"
    return out


def _new_registry_id(conn: Connection) -> None:
    conn.execute(registry_info.insert().values(key="registry_id", value=uuid.uuid4().hex))


def _migrate_1_to_2(conn: Connection) -> None:
    """Version 2 adds ``registry_info`` and gives the registry its id."""
    registry_info.create(conn, checkfirst=True)
    _new_registry_id(conn)


# Schema upgrades: _MIGRATIONS[v] takes a database at version v to v + 1.
_MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _migrate_1_to_2}
