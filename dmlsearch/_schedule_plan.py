"""The schedule of a multi-fidelity search: its arguments checked, before any work.

:func:`plan_schedule` turns ``SearchCV``'s ``scheduler``/``resource``/``min_resource``/
``max_resource``/``reduction_factor`` into a :class:`SchedulePlan` (the scheduler, the
resource ladder), raising :class:`~dmlsearch.exceptions.InvalidParameterError` for a bad
one; :func:`schedule_spec` describes those arguments for the experiment's configuration,
so that a resume with another schedule is refused.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import is_classifier

from .exceptions import InvalidParameterError
from .fidelity import check_resource
from .schedulers import (
    ASHA,
    SCHEDULERS,
    Hyperband,
    MedianStopping,
    Scheduler,
    SuccessiveHalving,
    check_schedule,
    hyperband_brackets,
    make_scheduler,
    rung_resources,
)
from .schedulers._base import check_int
from .space import describe_value
from .strategies import Strategy

if TYPE_CHECKING:
    from .search import SearchCV

__all__ = ["SchedulePlan", "bind_scheduler", "plan_schedule", "schedule_spec"]


@dataclass(frozen=True)
class SchedulePlan:
    """A checked schedule: the scheduler, the resource ladder and the strategy's count."""

    scheduler: Scheduler
    resource: str
    ladder: tuple[int, ...]
    steps: tuple[int, ...] | None
    #: ASHA or median stopping by name: their trial count comes from the strategy.
    bind: bool = False


def _bounds(
    search: SearchCV, splits: list[tuple[np.ndarray, np.ndarray]], y: Any
) -> tuple[int, int]:
    """``(min_resource, max_resource)`` with the defaults filled in, and n_samples checked."""
    smallest = min(len(train) for train, _ in splits)
    low, high = search.min_resource, search.max_resource
    for name, value in (("min_resource", low), ("max_resource", high)):
        if value is not None and not (isinstance(value, str) and value == "auto"):
            check_int(name, value, 1)  # before any arithmetic on it
        elif value is not None:
            raise InvalidParameterError(
                name, "scikit-learn's 'auto' is None here: leave it None for the default"
            )
    if search.resource == "n_samples":
        if high is None:
            high = smallest
        else:
            _check_rows(int(high), smallest, "max_resource")
        if low is None:
            # As scikit-learn's Halving searches: a few rows per fold (and per class).
            classes = len(np.unique(y)) if is_classifier(search.estimator) else 1
            low = min(2 * len(splits) * classes, int(high))
    elif high is None:
        raise InvalidParameterError(
            "max_resource",
            f"a scheduler needs max_resource, the most {search.resource!r} a trial gets "
            "(e.g. max_resource=81)",
        )
    return (1 if low is None else low), high


def _check_rows(high: int, smallest: int, name: str) -> None:
    """An ``n_samples`` budget of ``high`` rows needs that many in every training fold."""
    if high > smallest:
        raise InvalidParameterError(
            name,
            f"resource='n_samples' trains on at most the {smallest} rows of the smallest "
            f"training fold, got a top rung of {high} rows; lower it"
            + (" (or leave it None)" if name == "max_resource" else ""),
        )


def _check_not_searched(resource: str, search_space: Any) -> None:
    """InvalidParameterError if the space also searches the parameter the scheduler sets."""
    from .space import as_space

    if any(resource in sub for sub in as_space(search_space).subspaces):
        raise InvalidParameterError(
            "search_space",
            f"{resource!r} is the resource: the scheduler sets it at every rung (from "
            "min_resource to max_resource), so a searched value would be overridden and "
            f"best_params_ would not say what was trained; drop {resource!r} from the space, "
            "or search it without a scheduler",
        )


def plan_schedule(
    search: SearchCV, splits: list[tuple[np.ndarray, np.ndarray]], y: Any
) -> tuple[SchedulePlan, int | None]:
    """Check the scheduler's arguments; the plan and the number of trials to ask for.

    Raises :class:`InvalidParameterError` before any work: an unknown scheduler, no or a
    bad ``resource``, ``min_resource > max_resource``, ``reduction_factor < 2``, an
    ``n_samples`` budget larger than the data, or ``keep_oof``.
    """
    if getattr(search, "keep_oof", False):
        raise InvalidParameterError(
            "keep_oof",
            "out-of-fold predictions are not kept with a scheduler yet; drop keep_oof or "
            "the scheduler",
        )
    given = search.scheduler
    # A misspelt name first: its fix may make the other arguments' errors moot.
    if not isinstance(given, Scheduler) and (
        not isinstance(given, str) or given.lower() not in SCHEDULERS
    ):
        close = difflib.get_close_matches(str(given).lower(), SCHEDULERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidParameterError(
            "scheduler",
            f"unknown scheduler {given!r}{hint}. Choose one of {list(SCHEDULERS)} or pass a "
            "dmlsearch.schedulers.Scheduler",
        )
    if search.resource is None:
        raise InvalidParameterError(
            "resource",
            "a scheduler needs resource=: 'partial_fit' (epochs), 'n_samples' (rows) or an "
            "estimator parameter such as 'n_estimators' or 'max_iter'",
        )
    resource = check_resource(search.resource, search.estimator)
    _check_not_searched(resource, search.search_space)
    if isinstance(given, Scheduler):
        if search.min_resource is not None or search.max_resource is not None:
            raise InvalidParameterError(
                "scheduler",
                "a Scheduler instance carries its own min_resource/max_resource; leave "
                "SearchCV's unset",
            )
        eta = getattr(given, "reduction_factor", None)
        if eta is not None and search.reduction_factor not in (3, eta):
            raise InvalidParameterError(
                "reduction_factor",
                f"the Scheduler instance carries its own reduction factor ({eta}); "
                f"SearchCV's reduction_factor={search.reduction_factor!r} would be ignored: "
                "leave it at its default or set it on the instance",
            )
        ladder = _ladder_of(given)
        if resource == "n_samples":
            _check_rows(ladder[-1], min(len(train) for train, _ in splits), "scheduler")
        steps = None
        if isinstance(given, MedianStopping):
            ladder = steps = rung_resources(1, given.max_resource, search.reduction_factor)
        return SchedulePlan(given, resource, ladder, steps), _instance_trials(search, given)
    name = given.lower()
    low, high = _bounds(search, splits, y)
    r_min, R, eta = check_schedule(low, high, search.reduction_factor)
    ladder = rung_resources(r_min, R, eta)
    n = search.n_trials
    grid = _grid_size(search) if n is None else None
    if name == "halving":
        if grid is not None:  # the whole grid starts, as in HalvingGridSearchCV
            n = max(grid, eta ** (len(ladder) - 1))
        halving = SuccessiveHalving(r_min, R, eta, n)
        return SchedulePlan(halving, resource, ladder, None), halving.n_trials
    if name == "hyperband":
        per_round = sum(b.n for b in hyperband_brackets(R, eta, r_min))
        wanted = n if n is not None else grid
        rounds = 1 if wanted is None else max(1, -(-int(wanted) // per_round))
        hyperband = Hyperband(r_min, R, eta, rounds=rounds)
        return SchedulePlan(hyperband, resource, ladder, None), n or hyperband.n_trials
    # ASHA and median stopping learn their trial count from the strategy (see bind).
    placeholder = make_scheduler(name, max_resource=R)
    steps = ladder if name == "median" else None
    return SchedulePlan(placeholder, resource, ladder, steps, bind=True), n


def _instance_trials(search: SearchCV, given: Scheduler) -> int | None:
    """The trials to ask the strategy for beside a Scheduler instance: ``n_trials``, else
    what the instance bounds (the strategy's default, 10, would leave a Hyperband's
    brackets short and an ASHA budget unspent; a grid still gives its every point)."""
    if search.n_trials is not None or _grid_size(search) is not None:
        return search.n_trials
    if isinstance(given, (SuccessiveHalving, Hyperband)):
        return given.n_trials
    if isinstance(given, ASHA):
        if given.max_trials is not None:
            return given.max_trials
        if given.max_total_resource is not None:
            # Every trial spends at least the first rung: the most the budget can start.
            return given.max_total_resource // given.resources[0]
    return None


def _grid_size(search: SearchCV) -> int | None:
    """The number of grid points when ``strategy="grid"`` (every one is a trial), else None."""
    from .space import as_space

    strategy = search.strategy
    if not (isinstance(strategy, str) and strategy.strip().lower() == "grid"):
        return None
    space = as_space(search.search_space)
    return space.grid_size() if space.is_finite else None


def bind_scheduler(plan: SchedulePlan, strategy: Strategy, eta: int) -> Scheduler:
    """The scheduler, with ASHA's and median stopping's trial count from the strategy."""
    s = plan.scheduler
    if plan.bind and isinstance(s, ASHA):
        return ASHA(plan.ladder[0], plan.ladder[-1], eta, max_trials=strategy.total)
    if plan.bind and isinstance(s, MedianStopping):
        return MedianStopping(s.max_resource, strategy.total, s.warmup_steps, s.min_trials)
    return s


def _ladder_of(scheduler: Scheduler) -> tuple[int, ...]:
    if isinstance(scheduler, Hyperband):
        return tuple(sorted({r for b in scheduler.brackets for r in b.resources}))
    resources = getattr(scheduler, "resources", None)
    if resources is not None:
        return tuple(resources)
    return (int(getattr(scheduler, "max_resource", 1)),)


def schedule_spec(search: SearchCV) -> dict[str, Any]:
    """``search``'s schedule arguments, as the experiment's configuration records them.

    A :class:`Scheduler` instance is described by its class and attributes (all set in
    ``__init__``), so two equal policies describe alike.
    """
    given = search.scheduler
    if isinstance(given, Scheduler):
        attributes = {k: v for k, v in vars(given).items() if k != "brackets"}
        scheduler: Any = {"class": describe_value(type(given)), **describe_value(attributes)}
    else:
        scheduler = str(given).lower()
    return {
        "scheduler": scheduler,
        "resource": search.resource,
        "min_resource": describe_value(search.min_resource),
        "max_resource": describe_value(search.max_resource),
        "reduction_factor": describe_value(search.reduction_factor),
    }
