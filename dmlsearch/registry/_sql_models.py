"""``SQLStore``'s model registry: models, numbered versions, aliases, tags and metric search.

Separate from experiments and trials (``_sql_runs``): the two share only the core.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..exceptions import InvalidParameterError
from ._base import ModelSummary, ModelVersionRecord, NotFoundError, RegistryError, now
from ._checks import (
    MAX_NAME,
    check_alias_name,
    check_mapping,
    check_model_name,
    check_number,
    check_text,
)
from ._sql_core import _SQLCore
from ._sql_schema import (
    aliases,
    experiments,
    model_versions,
    models,
    version_metrics,
    version_tags,
)
from ._sql_values import (
    _check_model_args,
    _check_name,
    _check_paging,
    _chunks,
    _dumps,
    _free_text,
    _loads,
)

_SHA256 = re.compile(r"[0-9a-f]{64}")
# Cap on the ids in one IN (...) list.
_IN_CHUNK = 500


class _ModelsMixin(_SQLCore):
    """The model, version, alias and tag methods of ``SQLStore``."""

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
        check_model_name("model", model, max_length=MAX_NAME)
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
            # The value as set_tag stored it, so that searching for what was set finds it.
            tag = (tag[0], _free_text(tag[1]))
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
        check_alias_name("alias", alias, max_length=MAX_NAME)
        vanished = f"no version {version!r} of model {model!r} (deleted while setting {alias!r})"
        with self._transaction(write=True, vanished=vanished) as conn:
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
        text = _free_text(str(value))
        check_text("value", text, "a tag value")
        vanished = f"no version {version!r} of model {model!r} (deleted while tagging it)"
        with self._transaction(write=True, vanished=vanished) as conn:
            version_id = self._version_id(conn, model, version)
            stmt = self._insert(version_tags).values(version_id=version_id, key=key, value=text)
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
