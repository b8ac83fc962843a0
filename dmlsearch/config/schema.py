"""The search-space, search, cluster, registry and root sections."""

from __future__ import annotations

import functools
import math
import numbers
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ._common import STRATEGY_NAMES, Loc, _err, _known, _Problems, _short, _suggest
from ._data_model import (
    DataSection,
    ModelSection,
    NonNegInt,
    PosInt,
    Seconds,
    _check_kwargs,
    _model_shorthand,
    _Section,
)
from ._ensemble import EnsembleSection
from ._imports import _base_dir, _build_spec, _build_value, _import, _ImportFailed, _is_spec
from ._scheduler import SchedulerSection, check_resource_problem
from ._train import TrainSection

# -- search space --------------------------------------------------------------------------

_DIM_KEYS: dict[str, tuple[str, ...]] = {
    "float": ("type", "low", "high", "log"),
    "int": ("type", "low", "high", "log", "step"),
    "categorical": ("type", "choices"),
}


def _number(value: Any, loc: Loc, problems: _Problems, *, integral: bool) -> Any:
    kind = "an integer" if integral else "a number"
    if isinstance(value, bool) or value is None:
        problems.add(loc, f"expected {kind}, got {value!r}", value)
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            problems.add(loc, f"expected {kind}, got {value!r}", value)
            return None
    if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        problems.add(loc, f"expected a finite number, got {value!r}", value)
        return None
    number = float(value)
    if integral:
        if number != int(number):
            problems.add(loc, f"expected an integer, got {value!r}", value)
            return None
        return int(number)
    return number


def _parse_dimension(value: Any, loc: Loc, problems: _Problems, base_dir: Path | None) -> Any:
    from ..exceptions import SearchSpaceError
    from ..space import Categorical, Float, Int

    if isinstance(value, list):
        if not value:
            problems.add(loc, "the list of choices is empty")
            return None
        choices = [_build_value(v, (*loc, i), problems, base_dir) for i, v in enumerate(value)]
        return Categorical(choices)
    if not isinstance(value, dict):
        problems.add(
            loc,
            f"expected a list of choices or {{type: float|int|categorical, ...}}, got {value!r}; "
            f"a fixed value belongs in model.params (or write [{value!r}])",
            value,
        )
        return None
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in _DIM_KEYS:
        if "type" not in value:
            problems.add(loc, "missing type: float, int or categorical (or give a list of choices)")
        else:
            hint = _suggest(str(kind), list(_DIM_KEYS)) if isinstance(kind, str) else ""
            shown = repr(kind) if isinstance(kind, str) else _short(kind)
            problems.add(
                (*loc, "type"),
                f"unknown type {shown}; use float, int or categorical{hint}",
                kind,
            )
        return None
    allowed = _DIM_KEYS[kind]
    bad_keys = False
    for key in value:
        if key not in allowed:
            problems.add(
                (*loc, key),
                f"unknown key {key!r} in this {kind} dimension{_suggest(str(key), allowed)} "
                f"(keys: {', '.join(allowed)})",
                key,
            )
            bad_keys = True
    try:
        if kind == "categorical":
            listed = value.get("choices")
            if not isinstance(listed, list) or not listed:
                problems.add((*loc, "choices"), "expected a non-empty list of choices", listed)
                return None
            built = [
                _build_value(v, (*loc, "choices", i), problems, base_dir)
                for i, v in enumerate(listed)
            ]
            return None if bad_keys else Categorical(built)
        integral = kind == "int"
        bounds = {}
        for key in ("low", "high"):
            if key not in value:
                problems.add((*loc, key), "required")
            else:
                bounds[key] = _number(value[key], (*loc, key), problems, integral=integral)
        log = value.get("log", False)
        if not isinstance(log, bool):
            problems.add((*loc, "log"), f"expected true or false, got {log!r}", log)
            return None
        step = 1
        if "step" in value:
            step = _number(value["step"], (*loc, "step"), problems, integral=True)
        if bad_keys or None in bounds.values() or len(bounds) < 2 or step is None:
            return None
        if integral:
            return Int(bounds["low"], bounds["high"], log=log, step=step)
        return Float(bounds["low"], bounds["high"], log=log)
    except SearchSpaceError as exc:
        field = exc.param.rpartition(".")[2]
        message = str(exc)[len(exc.param) + 2 :]
        problems.add((*loc, field) if field in allowed else loc, message)
        return None


def _parse_space(raw: Any, problems: _Problems, base_dir: Path | None) -> Any:
    if isinstance(raw, dict):
        subspaces, single = [raw], True
    elif isinstance(raw, list):
        if not raw:
            problems.add((), "the list of sub-spaces is empty")
            return None
        subspaces, single = raw, False
    else:
        problems.add(
            (),
            "expected a mapping of parameter -> dimension, or a list of such mappings "
            f"(conditional sub-spaces); got {type(raw).__name__}",
        )
        return None
    out: list[dict[str, Any]] = []
    for i, sub in enumerate(subspaces):
        prefix: Loc = () if single else (i,)
        if not isinstance(sub, dict):
            problems.add(prefix, f"expected a mapping of parameter -> dimension, got {sub!r}")
            continue
        dims: dict[str, Any] = {}
        for name, value in sub.items():
            if not isinstance(name, str) or not name:
                problems.add((*prefix, str(name)), f"parameter names are strings, got {name!r}")
                continue
            dims[name] = _parse_dimension(value, (*prefix, name), problems, base_dir)
        out.append(dims)
    if problems:
        return None
    return out[0] if single else out


# -- search --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _scorer_names() -> frozenset[str]:
    from sklearn.metrics import get_scorer_names

    return frozenset(get_scorer_names())


class SearchSection(_Section):
    """What to try and how to score it; each field maps to a ``SearchCV`` argument."""

    space: Any
    strategy: Literal["random", "grid", "tpe", "cmaes", "gp", "nsga2"] = "random"
    n_trials: PosInt | None = None
    time_budget: Seconds | None = None
    time_budget_policy: Literal["stop", "finish"] = "stop"
    cv: Any = 5
    scoring: Any = None
    refit: Any = True
    error_score: Any = math.nan
    return_train_score: StrictBool = False
    random_state: NonNegInt | None = None
    max_concurrent_trials: PosInt | None = None
    trial_timeout: Seconds | None = None
    max_retries: NonNegInt = 2
    workers_per_trial: PosInt = 1

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() != value and value.lower() in STRATEGY_NAMES:
            return value.lower()
        if isinstance(value, str) and value not in STRATEGY_NAMES:
            raise _err(
                f"unknown strategy {value!r}; choose one of {', '.join(STRATEGY_NAMES)}"
                f"{_suggest(value, STRATEGY_NAMES)}"
            )
        return value

    @field_validator("space", mode="after")
    @classmethod
    def _space(cls, value: Any, info: ValidationInfo) -> Any:
        problems = _Problems()
        space = _parse_space(value, problems, _base_dir(info))
        problems.raise_if_any("space")
        return space

    @field_validator("cv", mode="after")
    @classmethod
    def _cv(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 2:
                raise _err(f"cv needs at least 2 folds, got {value}")
            return value
        if _is_spec(value):
            problems = _Problems()
            splitter = _build_spec(value, (), problems, _base_dir(info))
            if not problems and not hasattr(splitter, "split"):
                problems.add(
                    ("class",), f"{value['class']} is not a CV splitter (it has no split method)"
                )
            problems.raise_if_any("cv")
            return value
        raise _err(
            f"expected a number of folds (>= 2) or a splitter {{class: sklearn.model_selection.KFold, params: {{...}}}}, got {_short(value)!r}"
        )

    @field_validator("scoring", mode="after")
    @classmethod
    def _scoring(cls, value: Any) -> Any:
        if value is None:
            return None
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise _err(
                f"expected a scorer name (e.g. accuracy) or a list of names, got {_short(value)!r}"
            )
        if len(set(names)) != len(names):
            raise _err("scorer names must be unique")
        known = _scorer_names()
        problems = _Problems()
        for i, name in enumerate(names):
            if name not in known:
                loc: Loc = () if isinstance(value, str) else (i,)
                problems.add(
                    loc,
                    f"unknown scorer {name!r}{_suggest(name, known)} (see "
                    "sklearn.metrics.get_scorer_names())",
                    name,
                )
        problems.raise_if_any("scoring")
        return value

    @field_validator("refit", mode="after")
    @classmethod
    def _refit(cls, value: Any) -> Any:
        if not isinstance(value, (bool, str)) or value == "":
            raise _err(f"expected true, false or a scorer name, got {_short(value)!r}")
        return value

    @field_validator("error_score", mode="after")
    @classmethod
    def _error_score(cls, value: Any) -> Any:
        if value == "raise":
            return value
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        if value is None:
            return math.nan
        raise _err(f"expected raise or a number (default .nan), got {_short(value)!r}")

    @model_validator(mode="after")
    def _check(self) -> SearchSection:
        problems = _Problems()
        if isinstance(self.scoring, list) and not (
            self.refit is False or (isinstance(self.refit, str) and self.refit in self.scoring)
        ):
            problems.add(
                ("refit",),
                f"with several scorers, refit names the one to pick the best by (one of "
                f"{self.scoring}) or is false; got {self.refit!r}",
            )
        elif (
            isinstance(self.refit, str)
            and not isinstance(self.scoring, list)
            and self.refit != self.scoring
        ):
            problems.add(
                ("refit",),
                "with one scorer, refit is true or false"
                + (f" (or {self.scoring!r}, the scorer's name)" if self.scoring else "")
                + f"; a scorer name picks among several in scoring; got {self.refit!r}",
                self.refit,
            )
        if self.strategy == "grid":
            for loc, dim in _dimensions(self.space):
                if not dim.is_finite:
                    problems.add(
                        ("space", *loc),
                        "strategy grid needs finite dimensions: give a list of values, or use "
                        "strategy random or tpe",
                    )
        if self.strategy == "gp":
            import importlib.util

            if importlib.util.find_spec("torch") is None:
                problems.add(
                    ("strategy",), "strategy gp runs on torch: pip install dmlsearch[torch]"
                )
        problems.raise_if_any("SearchSection")
        return self


def _dimensions(space: Any) -> Iterator[tuple[Loc, Any]]:
    if isinstance(space, dict):
        for name, dim in space.items():
            yield (name,), dim
    elif isinstance(space, list):
        for i, sub in enumerate(space):
            for name, dim in sub.items():
                yield (i, name), dim


# -- cluster and registry ------------------------------------------------------------------


def _memory_limit(value: Any) -> Any:
    if value is None or value == "auto":
        return value
    if isinstance(value, bool):
        raise _err("expected bytes (e.g. 4GiB), auto or a fraction")
    if isinstance(value, (int, float)) and value >= 0:
        return value
    if isinstance(value, str):
        from dask.utils import parse_bytes

        try:
            parse_bytes(value)
        except (ValueError, TypeError):
            raise _err(f"expected a size such as 4GiB or 500MB, got {value!r}") from None
        return value
    raise _err(f"expected a size such as 4GiB, got {_short(value)!r}")


class LocalClusterSection(_Section):
    """A LocalCluster of worker processes on this machine, started for the run."""

    n_workers: PosInt | None = None
    threads_per_worker: PosInt = 1
    memory_limit: Annotated[Any, BeforeValidator(_memory_limit)] = None


class AdaptSection(_Section):
    """``cluster.adapt(minimum=..., maximum=...)`` for a cluster class that can adapt."""

    minimum: NonNegInt = 0
    maximum: PosInt

    @model_validator(mode="after")
    def _check(self) -> AdaptSection:
        if self.minimum > self.maximum:
            raise _err(f"minimum ({self.minimum}) is greater than maximum ({self.maximum})")
        return self


_ADDRESS = re.compile(
    r"^(?:(?:tcp|tls|ucx|ws|wss|inproc)://)?[^\s/:]+(?::\d{1,5})?/?$|^inproc://\S+$"
)


class ClusterSection(_Section):
    """Where trials run: one of ``local``, ``address`` or ``class``.

    Leave the whole section out for the embedded default (a LocalCluster sized to the
    machine, started and closed by the search).
    """

    local: LocalClusterSection | None = None
    address: str | None = None
    cls: str | None = Field(None, alias="class")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    scale: PosInt | None = None
    adapt: AdaptSection | None = None
    connect_timeout: Seconds = 30.0

    @field_validator("address", mode="after")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not _ADDRESS.match(value.strip()):
            raise _err(f"expected a scheduler address such as tcp://10.0.0.5:8786, got {value!r}")
        return None if value is None else value.strip()

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> ClusterSection:
        problems = _Problems()
        given = [
            k
            for k, v in (("local", self.local), ("address", self.address), ("class", self.cls))
            if v is not None
        ]
        if len(given) != 1:
            problems.add(
                (given[1],) if len(given) > 1 else (),
                "give exactly one of local (a LocalCluster), address (a running scheduler) or "
                f"class (e.g. dask_jobqueue.SLURMCluster); got {given or 'none'}. Leave the "
                "section out for the embedded default",
            )
        if self.cls is None:
            for key in ("kwargs", "scale", "adapt"):
                if getattr(self, key):
                    problems.add((key,), "only used with cluster.class")
        else:
            if self.scale is not None and self.adapt is not None:
                problems.add(("adapt",), "give scale or adapt, not both")
            try:
                cls = _import(self.cls, _base_dir(info))
            except _ImportFailed as exc:
                problems.add(("class",), str(exc), self.cls)
            else:
                if not callable(cls):
                    problems.add(("class",), f"{self.cls} is not a cluster class", self.cls)
                else:
                    _check_kwargs(cls, self.kwargs, problems)
        problems.raise_if_any("ClusterSection")
        return self


class RegistrySection(_Section):
    """Where experiments and models are recorded.

    ``url``: a SQLAlchemy database URL (default ``$DMLSEARCH_REGISTRY``, else
    ``sqlite:///./dmlsearch.db`` in the working directory); ``artifacts``: a folder or
    fsspec URL for model files (default beside a SQLite database).
    """

    url: str | None = None
    artifacts: str | None = None

    @field_validator("artifacts", mode="after")
    @classmethod
    def _artifacts(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\x00" in value):
            raise _err(
                f"expected a folder or fsspec URL for model files (e.g. ./artifacts or "
                f"s3://bucket/models), got {value!r}; leave it out for the default"
            )
        return value

    @field_validator("url", mode="after")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(value)
        except (ArgumentError, ValueError):
            raise _err(
                f"not a database URL: {value!r} (e.g. sqlite:///dmlsearch.db or postgresql+psycopg://user@host/db)"
            ) from None
        return value


# -- root ----------------------------------------------------------------------------------


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
            hint = _suggest(name, valid)
            if not hint:
                hint = f" (parameters: {_known(list(valid))})"
            problems.add(
                ("search", "space", *loc),
                f"{type(estimator).__name__} has no parameter {name!r}{hint}",
                name,
            )
        if self.scheduler is not None:
            why = check_resource_problem(self.scheduler, estimator)
            if why is not None:
                problems.add(("scheduler", "resource"), why, self.scheduler.resource)


def _valid_under_choice(name: str, space: Any, loc: Loc) -> bool:
    """``clf__C`` is valid when ``clf`` is itself searched over estimators that have ``C``."""
    sub = space if isinstance(space, dict) else space[int(loc[0])]
    prefix, _, rest = name.rpartition("__")
    while prefix:
        dim = sub.get(prefix)
        choices = getattr(dim, "choices", None)
        if choices is not None:
            return any(
                hasattr(c, "get_params") and rest in c.get_params(deep=True) for c in choices
            )
        head, _, tail = prefix.rpartition("__")
        prefix, rest = head, f"{tail}__{rest}"
    return False
