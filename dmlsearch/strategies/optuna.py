"""Model-based strategies driven through Optuna samplers with ask/tell.

Pending trials stay RUNNING in an in-memory study until told, so samplers that model
them (TPE's constant liar, GP's q-batch acquisition) know what is already being tried.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler
from optuna.trial import Trial, TrialState

from ..exceptions import InvalidParameterError, SearchSpaceError
from ..space import Categorical, Dimension, Distribution, Float, Int, SearchSpace
from ._base import Strategy, cap_trials
from .random import SeededBijection

__all__ = ["SAMPLERS", "OptunaStrategy", "sampler_seed", "to_optuna_distributions"]

DEFAULT_N_TRIALS = 10
_SUBSPACE = "__subspace__"
_PRIMITIVE = (type(None), bool, int, float, str)

#: A candidate as Optuna stores it: its sorted (Optuna name, internal value) pairs.
_Key = tuple[tuple[str, Any], ...]


def _key(values: dict[str, Any]) -> _Key:
    return tuple(
        sorted((k, v.item() if isinstance(v, np.generic) else v) for k, v in values.items())
    )


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Silence Optuna's per-trial INFO logs and experimental warnings, then restore them."""
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(previous)


def sampler_seed(seed: int) -> int:
    """The 32-bit seed an Optuna sampler gets, derived from any search seed >= 0.

    Optuna's samplers seed numpy's ``RandomState``, which takes ``[0, 2**32)``; a search
    seed may be any non-negative integer (the default one is 63-bit), so it is mixed down
    through ``SeedSequence`` rather than narrowed or rejected.
    """
    return int(np.random.SeedSequence(seed, spawn_key=(2**32 + 1,)).generate_state(1)[0])


def _tpe(seed: int) -> BaseSampler:
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True)


def _cmaes(seed: int) -> BaseSampler:
    return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)


def _gp(seed: int) -> BaseSampler:
    if importlib.util.find_spec("torch") is None:
        raise InvalidParameterError(
            "strategy",
            "strategy='gp' runs Optuna's GPSampler, which needs torch; "
            "install it (pip install 'dmlsearch[torch]') or choose 'tpe'",
        )
    return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)


def _nsga2(seed: int) -> BaseSampler:
    return optuna.samplers.NSGAIISampler(seed=seed)


#: Strategy names backed by an Optuna sampler, and how each is built from a 32-bit seed.
SAMPLERS: dict[str, Callable[[int], BaseSampler]] = {
    "tpe": _tpe,
    "cmaes": _cmaes,
    "gp": _gp,
    "nsga2": _nsga2,
}


def _dimension_to_optuna(name: str, dim: Dimension) -> Dimension:
    """Express a scipy distribution as Float/Int where an exact equivalent exists."""
    if not isinstance(dim, Distribution):
        return dim
    frozen = dim.dist
    family = getattr(frozen, "dist", None)
    dist_name = getattr(family, "name", None)
    if dist_name in ("uniform", "loguniform", "reciprocal", "randint"):
        low, high = (float(v) for v in frozen.support())
        n_shapes = int(getattr(family, "numargs", 0))
        args = tuple(getattr(frozen, "args", ()))
        loc = float(args[n_shapes]) if len(args) > n_shapes else float(frozen.kwds.get("loc", 0.0))
        if dist_name == "uniform":
            return Float(low, high)
        if dist_name == "randint":
            return Int(int(low), int(high))
        if loc == 0.0:  # a scaled log-uniform is still log-uniform; a shifted one is not
            return Float(low, high, log=True)
    raise SearchSpaceError(
        name,
        f"model-based strategies cannot use the distribution {dist_name or frozen!r}; "
        "use Float(low, high, log=...), Int(low, high) or a list of choices",
    )


class _Param:
    """How one parameter of one sub-space is suggested and decoded."""

    def __init__(self, key: str, optuna_name: str, dim: Dimension) -> None:
        self.key = key
        self.name = optuna_name
        self.dim = _dimension_to_optuna(key, dim)
        self.encoded: list[Any] | None = None
        if isinstance(self.dim, Categorical):
            choices = [c.item() if isinstance(c, np.generic) else c for c in self.dim.choices]
            # Only primitives are hashable for sure (a dict or list choice is not), and
            # Optuna finds a choice by equality: 1, 1.0 and True would collapse into one.
            primitive = all(isinstance(c, _PRIMITIVE) for c in choices)
            if primitive and len(set(choices)) == len(choices):
                self.encoded = choices
                self._choices = choices
            else:
                # Optuna stores only primitives: suggest an index, decode to the object.
                self.encoded = list(range(len(choices)))
                self._choices = list(self.dim.choices)

    def distribution(self) -> BaseDistribution:
        dim = self.dim
        if isinstance(dim, Float):
            return FloatDistribution(float(dim.low), float(dim.high), log=dim.log)
        if isinstance(dim, Int):
            return IntDistribution(*_int_bounds(dim), log=dim.log, step=int(dim.step))
        assert self.encoded is not None
        return CategoricalDistribution(self.encoded)

    def encode(self, value: Any) -> Any:
        """The value Optuna stores for ``value`` (raises ValueError if it is not a choice)."""
        if self.encoded is None:
            return value
        if self.encoded is self._choices:
            return self.encoded[self.encoded.index(value)]
        # Object choices come back from the registry as their repr. Compare reprs, never
        # the objects: ``==`` on an array choice is elementwise, not a truth value.
        texts = {repr(value), value} if isinstance(value, str) else {repr(value)}
        for index, choice in enumerate(self._choices):
            if choice is value or repr(choice) in texts:
                return index
        raise ValueError(f"{value!r} is not one of the choices of {self.key!r}")

    def suggest(self, trial: Trial) -> Any:
        dim = self.dim
        if isinstance(dim, Float):
            return trial.suggest_float(self.name, float(dim.low), float(dim.high), log=dim.log)
        if isinstance(dim, Int):
            low, high = _int_bounds(dim)
            return trial.suggest_int(self.name, low, high, step=int(dim.step), log=dim.log)
        assert self.encoded is not None
        value = trial.suggest_categorical(self.name, self.encoded)
        return self._choices[self.encoded.index(value)]


def _int_bounds(dim: Int) -> tuple[int, int]:
    """``dim``'s low and its grid's last point: Optuna warns (in the user's output) of a
    range its step does not divide, and rounds ``high`` down to that same point."""
    low, step = int(dim.low), int(dim.step)
    return low, low + (int(dim.high) - low) // step * step


def to_optuna_distributions(space: SearchSpace) -> list[list[_Param]]:
    """Per sub-space, the parameters as Optuna will see them (validates the space)."""
    many = len(space.subspaces) > 1
    out = []
    for i, sub in enumerate(space.subspaces):
        out.append([_Param(key, f"{i}:{key}" if many else key, sub[key]) for key in sorted(sub)])
    return out


class OptunaStrategy(Strategy):
    """Ask/tell over any Optuna sampler, maximising the search's refit score.

    On a finite space ``n_trials`` is capped at the number of distinct candidates (as
    random search does) and no candidate is run twice: when the sampler proposes one
    already run or running, the trial runs an untried one instead, in a seeded order.
    """

    adaptive = True

    def __init__(
        self,
        space: SearchSpace,
        n_trials: int | None,
        seed: int,
        sampler: str | BaseSampler = "tpe",
    ) -> None:
        super().__init__(space, n_trials, seed)
        if isinstance(sampler, str):
            try:
                sampler = SAMPLERS[sampler](sampler_seed(seed))
            except KeyError:
                raise InvalidParameterError(
                    "strategy",
                    f"unknown Optuna sampler {sampler!r}; choose from {sorted(SAMPLERS)}",
                ) from None
        self.sampler = sampler
        self._params = to_optuna_distributions(space)
        self._n = cap_trials(space, n_trials, DEFAULT_N_TRIALS)
        with _quiet_optuna():
            self.study = optuna.create_study(direction="maximize", sampler=sampler)
        self._pending: dict[int, Trial] = {}
        # Finite spaces only: the candidates asked or restored, and where to find others.
        self._tried: set[_Key] | None = None
        if space.is_finite:
            self._tried = set()
            self._order = SeededBijection(space.grid_size(), seed)
            self._cursor = 0

    @property
    def total(self) -> int:
        return self._n

    def ask(self, number: int) -> dict[str, Any] | None:
        if number >= self._n:
            return None
        with _quiet_optuna():
            trial = self.study.ask()
            params = self._suggest(trial)
            if self._tried is not None and _key(trial.params) in self._tried:
                # A repeat would only re-measure a known candidate. The sampler ignores
                # FAIL trials, so dropping its proposal this way teaches it nothing wrong.
                self.study.tell(trial, state=TrialState.FAIL)
                untried = self._untried()
                if untried is None:
                    return None
                self.study.enqueue_trial(untried)
                trial = self.study.ask()
                params = self._suggest(trial)
            if self._tried is not None:
                self._tried.add(_key(trial.params))
        trial.set_user_attr("dmlsearch_number", number)
        self._pending[number] = trial
        return params

    def _suggest(self, trial: Trial) -> dict[str, Any]:
        index = 0
        if len(self._params) > 1:
            index = int(trial.suggest_categorical(_SUBSPACE, list(range(len(self._params)))))
        return {p.key: p.suggest(trial) for p in self._params[index]}

    def _optuna_values(self, index: int, params: dict[str, Any]) -> dict[str, Any]:
        """The values Optuna stores for candidate ``params`` of sub-space ``index``."""
        values: dict[str, Any] = {}
        if len(self._params) > 1:
            values[_SUBSPACE] = index
        for p in self._params[index]:
            values[p.name] = p.encode(params[p.key])
        return values

    def _untried(self) -> dict[str, Any] | None:
        """The next grid point, in a seeded order, not asked or restored yet."""
        assert self._tried is not None
        while self._cursor < self._order.size:
            point = self._order(self._cursor)
            self._cursor += 1
            index = self.space.grid_subspace(point)
            values = self._optuna_values(index, self.space.grid_point(point))
            if _key(values) not in self._tried:
                return values
        return None

    def restore(self, number: int, params: dict[str, Any], value: float | None) -> None:
        keys = set(params)
        index = next((i for i, ps in enumerate(self._params) if {p.key for p in ps} == keys), None)
        if index is None:
            return  # not from this space: the sampler simply does not learn from it
        dists: dict[str, BaseDistribution] = {}
        if len(self._params) > 1:
            dists[_SUBSPACE] = CategoricalDistribution(list(range(len(self._params))))
        try:
            for p in self._params[index]:
                dists[p.name] = p.distribution()
            values = self._optuna_values(index, params)
            finite = value is not None and math.isfinite(value)
            trial = optuna.trial.create_trial(
                params=values,
                distributions=dists,
                value=float(value) if finite else None,  # type: ignore[arg-type]
                state=TrialState.COMPLETE if finite else TrialState.FAIL,
                user_attrs={"dmlsearch_number": number},
            )
        except ValueError:
            return
        with _quiet_optuna():
            self.study.add_trial(trial)
        if self._tried is not None:
            self._tried.add(_key(values))

    def tell(self, number: int, value: float | None) -> None:
        trial = self._pending.pop(number, None)
        if trial is None:
            return
        with _quiet_optuna():
            if value is None or not math.isfinite(value):
                self.study.tell(trial, state=TrialState.FAIL)
            else:
                self.study.tell(trial, float(value))
