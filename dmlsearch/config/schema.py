"""The root of an experiment file (``ExperimentConfig``), and the sections it is built from.

The sections live beside it: ``_search`` (search) and ``_space`` (its space),
``_cluster`` (cluster and registry), ``_data_model`` (data, model), ``_train``,
``_scheduler`` and ``_ensemble``. This module holds what checks one section against another
(a search's space against its model, a training job against its cluster) and re-exports the
section classes, which are imported from here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from .._validation import set_params_accepts
from ._cluster import AdaptSection, ClusterSection, LocalClusterSection, RegistrySection
from ._common import Loc, _err, _known, _Problems, _suggest
from ._data_model import DataSection, ModelSection, _model_shorthand, _Section
from ._ensemble import EnsembleSection
from ._scheduler import SchedulerSection, check_resource_problem
from ._search import SearchSection
from ._space import _dimensions
from ._train import TrainSection

__all__ = [
    "AdaptSection",
    "ClusterSection",
    "ExperimentConfig",
    "LocalClusterSection",
    "RegistrySection",
    "SearchSection",
]


#: Stands for a section of a search that the file lacks, and for a train section written
#: beside a search: both reported where they belong, with every other problem of the file.
_MISSING = object()
_BESIDE_SEARCH = object()
_KINDS = "an experiment file describes a search (model and search) or a training job (train)"


def _search_part(name: str, before: Any = None) -> Any:
    def check(value: Any) -> Any:
        if value is _MISSING:
            raise _err(f"required key {name!r} is missing; {_KINDS}")
        return before(value) if before is not None else value

    return check


def _train_alone(value: Any) -> Any:
    if value is _BESIDE_SEARCH:
        raise _err(f"{_KINDS}, not both: remove train, or model and search")
    return value


def _experiment_name(value: Any) -> Any:
    if isinstance(value, str):
        value = value.strip()
        if not value or len(value) > 200 or not value.isprintable():
            raise _err(f"expected a printable name of 1 to 200 characters, got {value!r}")
        if "@" in value:  # the best model is registered under it, and name@alias is an alias
            raise _err(f"a name without '@' (the best model's name), got {value!r}")
    return value


class ExperimentConfig(_Section):
    """An experiment file, schema version 1.

    New capabilities arrive as new optional sections (see docs/config.md), so a version-1
    file stays valid; ``version`` changes only when an existing field changes meaning.
    """

    version: Literal[1]
    name: Annotated[str, BeforeValidator(_experiment_name)]
    description: str | None = None
    data: DataSection
    model: Annotated[
        ModelSection | None, BeforeValidator(_search_part("model", _model_shorthand))
    ] = None
    search: Annotated[SearchSection | None, BeforeValidator(_search_part("search"))] = None
    train: Annotated[TrainSection | None, BeforeValidator(_train_alone)] = None
    scheduler: SchedulerSection | None = None
    ensemble: EnsembleSection | None = None
    cluster: ClusterSection | None = None
    registry: RegistrySection = Field(default_factory=RegistrySection)

    @model_validator(mode="before")
    @classmethod
    def _kind(cls, data: Any) -> Any:
        """A search needs model and search; a training job has train and neither."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("train") is None:
            data.setdefault("model", _MISSING)
            data.setdefault("search", _MISSING)
        elif "model" in data or "search" in data:
            data["train"] = _BESIDE_SEARCH
        return data

    @property
    def kind(self) -> Literal["search", "train"]:
        """``"train"`` for a training job, else ``"search"``."""
        return "train" if self.train is not None else "search"

    @model_validator(mode="after")
    def _check(self) -> ExperimentConfig:
        problems = _Problems()
        if self.train is not None:
            self._check_train(self.train, problems)
        elif self.model is None or self.search is None:
            for key in ("model", "search"):
                if getattr(self, key) is None:
                    problems.add((key,), f"required (not null) for a search; {_KINDS}")
        else:
            self._check_search(self.model, self.search, problems)
        problems.raise_if_any("ExperimentConfig")
        return self

    def _check_train(self, train: TrainSection, problems: _Problems) -> None:
        for key in ("scheduler", "ensemble"):
            if getattr(self, key) is not None:
                problems.add((key,), f"only used with a search; a training job has no {key}")
        local = self.cluster.local if self.cluster is not None else None
        if local is not None and local.n_workers is not None and train.n_workers > local.n_workers:
            problems.add(
                ("train", "n_workers"),
                f"the cluster has {local.n_workers} workers (cluster.local.n_workers) and a "
                f"training job runs one rank per worker: use at most {local.n_workers}",
                train.n_workers,
            )

    def _check_gang(self, search: SearchSection, estimator: Any, problems: _Problems) -> None:
        """What the run would refuse about trials on gangs of ``workers_per_trial``."""
        k = search.workers_per_trial
        why = _gang_problem(k, estimator)
        if why is not None:
            problems.add(("search", "workers_per_trial"), why, k)
            return
        local = self.cluster.local if self.cluster is not None else None
        if local is not None and local.n_workers is not None and k > local.n_workers:
            problems.add(
                ("search", "workers_per_trial"),
                f"each trial trains on {k} workers at once and the cluster has "
                f"{local.n_workers} (cluster.local.n_workers): use at most {local.n_workers}",
                k,
            )
        if search.trial_timeout is not None:
            problems.add(
                ("search", "trial_timeout"),
                f"does not combine with workers_per_trial: {k} yet (a gang's collective has "
                "its own timeout): remove it, or set workers_per_trial: 1",
            )
        if self.scheduler is not None:
            from ..exceptions import InvalidParameterError
            from ..runner.gang_rungs import check_gang_resource

            try:
                check_gang_resource(self.scheduler.resource, k, estimator)
            except InvalidParameterError as exc:
                message = str(exc).removeprefix(f"{exc.param}: ")
                problems.add(("scheduler", "resource"), message, self.scheduler.resource)

    def _check_search(
        self, model: ModelSection, search: SearchSection, problems: _Problems
    ) -> None:
        estimator = model._estimator
        if estimator is None:
            return
        valid = set(estimator.get_params(deep=True))
        for loc, _dim in _dimensions(search.space):
            name = str(loc[-1])
            if name in valid or _valid_under_choice(name, search.space, loc):
                continue
            # Names set_params takes though get_params does not list them (xgboost's eta).
            if set_params_accepts(estimator, {name: None}, name):
                continue
            hint = _suggest(name, valid)
            if not hint:
                hint = f" (parameters: {_known(list(valid))})"
            problems.add(
                ("search", "space", *loc),
                f"{type(estimator).__name__} has no parameter {name!r}{hint}",
                name,
            )
        searched = {str(loc[-1]) for loc, _dim in _dimensions(search.space)}
        if self.scheduler is not None:
            resource = self.scheduler.resource
            why = check_resource_problem(self.scheduler, estimator)
            if why is None and resource in searched:
                why = (
                    f"{resource!r} is also searched over in search.space, and the scheduler "
                    "sets it at every rung (min_resource to max_resource): remove it from "
                    "search.space, or count another resource"
                )
            if why is not None:
                problems.add(("scheduler", "resource"), why, resource)
        k = search.workers_per_trial
        if k > 1:
            self._check_gang(search, estimator, problems)
        why = _early_stopping_problem(estimator, search.space, k)
        if why is not None:
            problems.add(("model",), why)
        if self.ensemble is not None:
            # Selection needs every trial's out-of-fold predictions (keep_oof).
            for needs, what in (
                (self.scheduler is not None, "the scheduler section"),
                (k > 1, "search.workers_per_trial > 1 (set it to 1)"),
            ):
                if needs:
                    problems.add(
                        ("ensemble",),
                        "ensemble selection needs each trial's out-of-fold predictions, "
                        f"which are not kept with {what} yet: remove one of the two",
                    )
            from ..registry._skorch import nested_net

            net = nested_net(estimator)
            if net is not None:
                problems.add(
                    ("ensemble",),
                    f"the members would be {type(estimator).__name__}s holding a torch net "
                    f"({net}), which the registry can save only with pickle (a run never "
                    "pickles): make the net itself the model, or remove the ensemble section",
                )


def _early_stopping_problem(estimator: Any, space: Any, k: int) -> str | None:
    """xgboost early stopping, which needs fit's eval_set: a file cannot pass one."""
    from .._search_checks import check_early_stopping
    from ..exceptions import InvalidParameterError

    try:
        check_early_stopping(estimator, space, {}, k)
    except InvalidParameterError as exc:
        return (
            f"{exc.param}: xgboost's early stopping needs fit's eval_set, which an experiment "
            "file cannot pass: drop it, and let a scheduler section stop poor trials "
            "(scheduler: {kind: asha, resource: n_estimators, max_resource: ...})"
        )
    return None


def _gang_problem(k: int, estimator: Any) -> str | None:
    """Why trials of ``estimator`` cannot run on gangs of ``k`` workers (None: they can)."""
    from ..exceptions import InvalidParameterError
    from ..runner.gang_trials import check_workers_per_trial

    try:
        check_workers_per_trial(k, estimator)
    except InvalidParameterError as exc:
        return str(exc).removeprefix(f"{exc.param}: ")
    return None


def _valid_under_choice(name: str, space: Any, loc: Loc) -> bool:
    """``clf__C`` is valid when ``clf`` is itself searched over estimators that have ``C``."""
    sub = space if isinstance(space, dict) else space[int(loc[0])]
    prefix, _, rest = name.rpartition("__")
    while prefix:
        dim = sub.get(prefix)
        choices = getattr(dim, "choices", None)
        if choices is not None:
            return any(
                hasattr(c, "get_params")
                and (rest in c.get_params(deep=True) or set_params_accepts(c, {rest: None}, rest))
                for c in choices
            )
        head, _, tail = prefix.rpartition("__")
        prefix, rest = head, f"{tail}__{rest}"
    return False
