"""The ``search:`` section: what to try and how to score it (one ``SearchCV`` argument a field).

Separate from the space parsing (``_space``) and from the root section (``schema``): this is
the validation of the search's own arguments (strategy, cv, scoring, refit, budgets).
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Literal

from pydantic import StrictBool, ValidationInfo, field_validator, model_validator

from ._common import STRATEGY_NAMES, Loc, _err, _Problems, _short, _suggest
from ._data_model import NonNegInt, PosInt, Seconds, _Section
from ._imports import _base_dir, _build_spec, _is_spec
from ._space import _dimensions, _parse_space

__all__ = ["SearchSection"]


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
