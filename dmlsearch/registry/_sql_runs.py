"""``SQLStore``'s experiments and trials: recording searches and querying their results.

Separate from the model versions (``_sql_models``): the two share only the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..exceptions import InvalidParameterError
from ._base import (
    COMPLETE,
    RUNNING,
    AlreadyExistsError,
    ExperimentRecord,
    NotFoundError,
    TrialRecord,
    now,
)
from ._checks import MAX_NAME, check_count, check_mapping, check_new_name, check_states, check_text
from ._sql_core import _SQLCore
from ._sql_schema import (
    _PG_TRIALS_UPSERT,
    _SQLITE_TRIALS_UPSERT,
    _TRIAL_COLUMNS,
    experiments,
    trials,
)
from ._sql_values import (
    _check_experiment_key,
    _check_paging,
    _chunks,
    _dumps,
    _float_or_none,
    _free_text,
    _loads,
    _states,
)

# Trials per statement on PostgreSQL (arrays of this length, one per column).
_PG_TRIAL_CHUNK = 10_000


class _RunsMixin(_SQLCore):
    """The experiment and trial methods of ``SQLStore``."""

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
        check_new_name("name", name, "an experiment name", max_length=MAX_NAME)
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
            "worker": _free_text(t.worker),
            "retries": int(t.retries),
            "error": _free_text(t.error),
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
        vanished = f"no experiment with id {experiment_id!r} (deleted while recording trials)"
        with self._transaction(write=True, vanished=vanished) as conn:
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

    def count_trials_by_state(self, experiment_id: int) -> dict[str, int]:
        query = (
            sa.select(trials.c.state, sa.func.count())
            .where(*self._trial_filter(experiment_id, None))
            .group_by(trials.c.state)
        )
        with self._transaction(write=False) as conn:
            self._require_experiment(conn, experiment_id)
            return {str(state): int(n) for state, n in conn.execute(query).all()}

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
