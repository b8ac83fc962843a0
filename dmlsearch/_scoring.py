"""Turn ``scoring`` into scorers, with errors that name the bad scorer."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sklearn.metrics import check_scoring, get_scorer, get_scorer_names

from .exceptions import InvalidParameterError

__all__ = ["Scoring", "resolve_scoring"]


@dataclass
class Scoring:
    """The scorers of a search.

    ``scorer`` is what workers call: one callable returning a float, or (multi-metric)
    one returning a dict of name -> float that shares predictions between metrics.
    ``scorer_`` is what scikit-learn exposes as ``SearchCV.scorer_``.
    """

    scorer: Callable[..., Any]
    multimetric: bool
    names: list[str]
    scorer_: Any


def _one(estimator: Any, scoring: Any, where: str) -> Callable[..., Any]:
    if isinstance(scoring, str):
        if scoring not in get_scorer_names():
            close = difflib.get_close_matches(scoring, get_scorer_names(), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise InvalidParameterError(
                where,
                f"unknown scorer {scoring!r}{hint} (sklearn.metrics.get_scorer_names() lists them)",
            )
        return get_scorer(scoring)
    if callable(scoring):
        return scoring
    raise InvalidParameterError(
        where, f"expected a scorer name or a callable scorer(estimator, X, y), got {scoring!r}"
    )


def resolve_scoring(estimator: Any, scoring: Any) -> Scoring:
    """Validate ``scoring`` against ``estimator`` (scikit-learn's rules)."""
    if scoring is None:
        try:
            scorer = check_scoring(estimator)
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(
                "scoring", f"the estimator has no score method; pass scoring=... ({exc})"
            ) from exc
        return Scoring(scorer, False, ["score"], scorer)
    if isinstance(scoring, (str,)) or callable(scoring):
        scorer = _one(estimator, scoring, "scoring")
        return Scoring(scorer, False, ["score"], scorer)
    if isinstance(scoring, (list, tuple, set)):
        items = list(scoring)
        if not items:
            raise InvalidParameterError("scoring", "an empty list of scorers")
        if not all(isinstance(s, str) for s in items):
            raise InvalidParameterError(
                "scoring", "a list of scorers must hold scorer names; use a dict for callables"
            )
        if len(set(items)) != len(items):
            raise InvalidParameterError("scoring", f"duplicate scorer names in {items}")
        scorers = {name: _one(estimator, name, f"scoring[{name!r}]") for name in items}
    elif isinstance(scoring, dict):
        if not scoring:
            raise InvalidParameterError("scoring", "an empty dict of scorers")
        scorers = {}
        for name, value in scoring.items():
            if not isinstance(name, str):
                raise InvalidParameterError(
                    "scoring", f"scorer names must be strings, got {name!r}"
                )
            scorers[name] = _one(estimator, value, f"scoring[{name!r}]")
    else:
        raise InvalidParameterError(
            "scoring",
            f"expected None, a scorer name, a callable, a list of names or a dict; got {scoring!r}",
        )
    multi = check_scoring(estimator, scoring=scorers)
    return Scoring(multi, True, list(scorers), scorers)
