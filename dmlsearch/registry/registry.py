"""``Registry``: the user-facing model registry over a metadata store and an artifact store."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..exceptions import InvalidParameterError
from ._base import ExperimentRecord, ModelVersionRecord, RegistryStore
from .artifacts import ArtifactStore, default_artifacts_url
from .formats import Serialized, dump_model, load_model
from .sql import SQLStore, default_registry_url

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Registry", "as_registry"]


def _artifacts_next_to(url: str) -> str:
    """Keep a SQLite registry's blobs beside its database file, unless told otherwise."""
    if "DMLSEARCH_ARTIFACTS" in os.environ:
        return default_artifacts_url()
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        folder = os.path.dirname(os.path.abspath(str(parsed.database)))
        return os.path.join(folder, "dmlsearch-artifacts")
    return default_artifacts_url()


class Registry:
    """Experiments, trials and versioned models.

    Metadata lives in SQL (``url``: SQLite by default, a ``postgresql+psycopg://`` URL at
    scale, or ``DMLSEARCH_REGISTRY``); model files live in a content-addressed artifact
    store (``artifacts``: a local folder by default, any fsspec URL at scale), verified by
    sha256 on every load.
    """

    def __init__(
        self,
        url: str | None = None,
        artifacts: str | None = None,
        *,
        store: RegistryStore | None = None,
    ) -> None:
        self.url = url or default_registry_url()
        self.store: RegistryStore = store if store is not None else SQLStore(self.url)
        self.artifacts = ArtifactStore(artifacts or _artifacts_next_to(self.url))

    def __repr__(self) -> str:
        return f"Registry({self.store!r}, artifacts={self.artifacts.url!r})"

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- experiments and trials -------------------------------------------------------------
    def experiment(self, name_or_id: str | int) -> ExperimentRecord:
        return self.store.get_experiment(name_or_id)

    def experiments(self) -> pd.DataFrame:
        """One row per experiment: id, name, status, created, number of trials, best value."""
        import pandas as pd

        summaries = self.store.experiment_summaries()
        rows = []
        for exp in self.store.list_experiments():
            n_trials, best = summaries.get(exp.id, (0, None))
            rows.append(
                {
                    "id": exp.id,
                    "name": exp.name,
                    "status": exp.status,
                    "created": pd.Timestamp(exp.created, unit="s", tz="UTC"),
                    "trials": n_trials,
                    "best_value": best,
                }
            )
        columns = ["id", "name", "status", "created", "trials", "best_value"]
        return pd.DataFrame(rows, columns=columns)

    def trials(
        self, experiment: str | int, state: str | Sequence[str] | None = None
    ) -> pd.DataFrame:
        """The trials of an experiment as a DataFrame (``param_<name>`` columns)."""
        exp = self.store.get_experiment(experiment)
        return self.store.trials_dataframe(exp.id, state=state)

    def leaderboard(self, experiment: str | int, k: int = 10) -> pd.DataFrame:
        """The ``k`` best completed trials, best first."""
        import pandas as pd

        exp = self.store.get_experiment(experiment)
        rows = [
            {"number": t.number, "value": t.value, **{f"param_{n}": v for n, v in t.params.items()}}
            for t in self.store.leaderboard(exp.id, k=k)
        ]
        return pd.DataFrame(rows)

    def to_optuna(self, experiment: str | int, storage: Any = None) -> Any:
        """Copy an experiment's trials into an Optuna study (maximised objective).

        ``optuna.visualization`` and optuna-dashboard then work on our trials. ``storage``
        is any Optuna storage (URL or object); default in memory. Distributions are
        inferred from the recorded values: numbers span their observed range (log scale
        when positive over more than two decades), anything else is categorical.
        """
        import optuna

        exp = self.store.get_experiment(experiment)
        trials = self.store.get_trials(exp.id)
        distributions = _infer_distributions([t.params for t in trials])
        study = optuna.create_study(
            study_name=exp.name, storage=storage, direction="maximize", load_if_exists=False
        )
        study.set_user_attr("dmlsearch_experiment_id", exp.id)
        frozen = []
        for t in trials:
            params = {k: _optuna_value(v) for k, v in t.params.items() if k in distributions}
            complete = t.state == "complete" and t.value is not None
            frozen.append(
                optuna.trial.create_trial(
                    params=params,
                    distributions={k: distributions[k] for k in params},
                    value=t.value if complete else None,
                    state=optuna.trial.TrialState.COMPLETE
                    if complete
                    else optuna.trial.TrialState.FAIL,
                    user_attrs={"dmlsearch_number": t.number, "worker": t.worker or ""},
                )
            )
        study.add_trials(frozen)
        return study

    # -- models -----------------------------------------------------------------------------
    def register_model(
        self,
        name: str,
        model: Any,
        *,
        metrics: Mapping[str, Any] | None = None,
        experiment: str | int | None = None,
        trial: int | None = None,
        data_fingerprint: str | None = None,
        signature: Mapping[str, Any] | None = None,
        lineage: Mapping[str, Any] | None = None,
        allow_pickle: bool = False,
    ) -> ModelVersionRecord:
        """Save ``model`` as the next version of ``name``.

        The blob is written first, then the metadata in one transaction: a crash in
        between leaves an unreferenced blob (removed by :meth:`gc`), never a half version.
        """
        serialized = dump_model(model, allow_pickle=allow_pickle)
        links: dict[str, Any] = dict(lineage or {})
        if experiment is not None:
            exp = self.store.get_experiment(experiment)
            links.setdefault("experiment_id", exp.id)
            links.setdefault("experiment", exp.name)
            if data_fingerprint is None:
                data_fingerprint = exp.data_fingerprint
        if trial is not None:
            links.setdefault("trial", int(trial))
        if data_fingerprint is not None:
            links.setdefault("data_fingerprint", data_fingerprint)
        links.setdefault("format_meta", serialized.meta)
        uri, digest = self.artifacts.put(serialized.data)
        return self.store.create_model_version(
            name,
            artifact_uri=uri,
            sha256=digest,
            format=serialized.format,
            metrics=dict(metrics or {}),
            signature=dict(signature) if signature is not None else None,
            lineage=links,
            trusted_types=serialized.trusted_types,
        )

    def model_version(
        self, name: str, version: int | None = None, alias: str | None = None
    ) -> ModelVersionRecord:
        """The record of a version (latest when neither ``version`` nor ``alias`` is given)."""
        if isinstance(name, str) and "@" in name and alias is None and version is None:
            name, alias = name.split("@", 1)
        return self.store.get_model_version(name, version=version, alias=alias)

    def load_model(
        self,
        name: str,
        version: int | None = None,
        alias: str | None = None,
        *,
        allow_pickle: bool = False,
        module: Any = None,
    ) -> Any:
        """Load a version; ``"name@alias"`` works too. The artifact's sha256 is verified."""
        record = self.model_version(name, version=version, alias=alias)
        data = self.artifacts.get(record.sha256)
        serialized = Serialized(
            data,
            record.format,
            trusted_types=list(record.trusted_types),
            meta=dict(record.lineage.get("format_meta", {})),
        )
        return load_model(serialized, allow_pickle=allow_pickle, module=module)

    def set_alias(self, name: str, alias: str, version: int) -> None:
        self.store.set_alias(name, alias, version)

    def delete_version(self, name: str, version: int) -> None:
        self.store.delete_model_version(name, version)

    def models(self) -> list[str]:
        return self.store.list_models()

    def versions(self, name: str) -> list[ModelVersionRecord]:
        return self.store.list_model_versions(name)

    def search_models(
        self,
        *,
        name: str | None = None,
        tag: tuple[str, str] | None = None,
        metric: str | None = None,
        min_value: float | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[ModelVersionRecord]:
        """Versions matching every filter, best ``metric`` first when one is given."""
        return self.store.search_model_versions(
            model=name, tag=tag, metric=metric, min_value=min_value, offset=offset, limit=limit
        )

    def verify(self) -> dict[tuple[str, int], bool]:
        """Whether every version's artifact exists and matches its sha256."""
        out = {}
        for model in self.store.list_models():
            for record in self.store.list_model_versions(model):
                out[(model, record.version)] = self.artifacts.verify(record.sha256)
        return out

    def gc(self) -> list[str]:
        """Delete blobs no version references; returns their sha256."""
        referenced = self.store.referenced_artifacts()
        removed = sorted(self.artifacts.digests() - referenced)
        for digest in removed:
            self.artifacts.delete(digest)
        return removed


def _optuna_value(value: Any) -> Any:
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value
    return repr(value)


def _infer_distributions(all_params: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    import math

    from optuna.distributions import CategoricalDistribution, FloatDistribution

    values: dict[str, list[Any]] = {}
    for params in all_params:
        for key, value in params.items():
            values.setdefault(key, []).append(_optuna_value(value))
    out: dict[str, Any] = {}
    for key, vals in values.items():
        numeric = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numeric) == len(vals) and all(math.isfinite(v) for v in numeric):
            low, high = float(min(numeric)), float(max(numeric))
            log = low > 0 and high / low > 100
            out[key] = FloatDistribution(low, high if high > low else low + 1e-12, log=log)
        else:
            choices: list[Any] = []
            for v in vals:
                if v not in choices:
                    choices.append(v)
            out[key] = CategoricalDistribution(choices)
    return out


def as_registry(registry: Any) -> Registry:
    """A :class:`Registry` from what ``SearchCV(registry=...)`` accepts: one, or a URL."""
    if isinstance(registry, Registry):
        return registry
    if isinstance(registry, str):
        return Registry(registry)
    raise InvalidParameterError(
        "registry", f"expected a dmlsearch.Registry or a database URL, got {registry!r}"
    )
