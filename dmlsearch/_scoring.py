"""Turn ``scoring`` into scorers (with errors that name the bad scorer), and score a
fitted fold as scikit-learn's searches do."""

from __future__ import annotations

import difflib
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from inspect import signature
from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.metrics import check_scoring, get_scorer, get_scorer_names

from .exceptions import InvalidParameterError, TrialTimeoutError

__all__ = ["Scoring", "resolve_scoring", "score", "score_fold", "scorer_takes_weight"]


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


def resolve_scoring(estimator: Any, scoring: Any, raise_exc: bool = True) -> Scoring:
    """Validate ``scoring`` against ``estimator`` (scikit-learn's rules).

    ``raise_exc=False`` (a search whose ``error_score`` is not ``"raise"``): a multi-metric
    scorer returns the traceback of a metric that fails instead of raising, so the other
    metrics keep their scores, as in scikit-learn's searches.
    """
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
    try:
        multi = check_scoring(estimator, scoring=scorers, raise_exc=raise_exc)
    except TypeError:  # a scikit-learn without raise_exc: every metric fails together
        multi = check_scoring(estimator, scoring=scorers)
    return Scoring(multi, True, list(scorers), scorers)


def _accepts_weight(scorer: Any) -> bool:
    accept = getattr(scorer, "_accept_sample_weight", None)
    if accept is not None:
        return bool(accept())
    try:
        return "sample_weight" in signature(scorer).parameters
    except (TypeError, ValueError):
        return False


def scorer_takes_weight(scoring: Scoring, fit_params: Mapping[str, Any]) -> bool:
    """Whether the folds' scorers get ``fit_params["sample_weight"]`` (their rows of it).

    As the installed scikit-learn's searches do: from 1.8 they pass ``sample_weight``
    given to ``fit`` on to a scorer that takes it (a multi-metric scorer: to each, when one
    takes it), and warn about a scorer that does not.
    """
    from sklearn.model_selection._search import BaseSearchCV

    if fit_params.get("sample_weight") is None:
        return False
    if not hasattr(BaseSearchCV, "_check_scorers_accept_sample_weight"):
        return False  # this scikit-learn scores without weights
    scorers = scoring.scorer_ if scoring.multimetric else {"score": scoring.scorer}
    accepted = {name: _accepts_weight(s) for name, s in scorers.items()}
    for name, ok in accepted.items():
        if not ok:
            warnings.warn(
                f"the scoring {name}={scorers[name]!r} does not take sample_weight, so the "
                "folds are scored without the weights given to fit (as in scikit-learn)",
                UserWarning,
                stacklevel=3,
            )
    return any(accepted.values())


try:  # private: if a later scikit-learn moves it, every scorer takes the general path
    from sklearn.metrics._scorer import _PassthroughScorer
except ImportError:  # pragma: no cover
    _PassthroughScorer = None


def _plain_accuracy(scorer: Any, estimator: Any, y: Any) -> bool:
    """Whether ``scorer`` would compute plain accuracy on 1-d labels.

    The default scorer of a classifier is ``ClassifierMixin.score``, i.e. ``accuracy_score``,
    whose target-type checks cost more than the prediction on small data (0.7 ms a call
    with scikit-learn 1.9). On 1-d numpy labels it is ``mean(y_pred == y)``, bit for bit.
    """
    return (
        type(scorer) is _PassthroughScorer
        and getattr(type(estimator), "score", None) is ClassifierMixin.score
        and isinstance(y, np.ndarray)
        and y.ndim == 1
        and (y.dtype.kind in "biu" or (y.dtype.kind == "f" and bool(np.all(np.mod(y, 1) == 0))))
    )


def score(
    scorer: Callable[..., Any],
    estimator: Any,
    X: Any,
    y: Any,
    multimetric: bool,
    sample_weight: Any = None,
) -> dict[str, float]:
    """``{metric: score}`` of a fitted ``estimator``; a metric that failed in a multi-metric
    scorer built with ``raise_exc=False`` is left out (its ``error_score`` is filled in
    later), and :class:`ScoringError` is raised when every metric failed."""
    kwargs = {} if sample_weight is None else {"sample_weight": sample_weight}
    if not multimetric and not kwargs and _plain_accuracy(scorer, estimator, y):
        y_pred = np.asarray(estimator.predict(X))
        if y_pred.shape == y.shape and y_pred.dtype.kind in "biuf":
            return {"score": float(np.mean(y_pred == y))}
    result = scorer(estimator, X, **kwargs) if y is None else scorer(estimator, X, y, **kwargs)
    if not multimetric:
        if isinstance(result, Mapping):
            raise InvalidParameterError(
                "scoring",
                f"the scoring callable returned a dict (keys {sorted(map(str, result))}): "
                "pass scoring as a dict of one callable per metric, {name: scorer}, so that "
                "the metrics are known before the search",
            )
        return {"score": float(result)}
    failed = {k: v for k, v in result.items() if isinstance(v, str)}
    if failed and len(failed) == len(result):
        raise ScoringError(next(iter(failed.values())))
    return {k: float(v) for k, v in result.items() if k not in failed}


class ScoringError(Exception):
    """Every metric of a multi-metric scorer failed; the message is the first traceback."""


def score_fold(
    scorer: Callable[..., Any],
    multimetric: bool,
    error_score: Any,
    estimator: Any,
    test: tuple[Any, Any, Any],
    train: tuple[Any, Any, Any] | None,
) -> tuple[dict[str, float], dict[str, float], str | None]:
    """A fitted fold's test scores, train scores and an error (the traceback) or None.

    ``test`` and ``train`` are ``(X, y, sample_weight or None)``; ``train`` None: no train
    scores. As in scikit-learn the two fail apart: train rows a scorer cannot score leave
    the train scores empty (``error_score``) and the test scores stand. Test rows that
    cannot be scored are the fold's error (the trial fails, as before). With
    ``error_score="raise"`` every failure propagates.
    """
    try:
        tested = score(scorer, estimator, test[0], test[1], multimetric, test[2])
    except TrialTimeoutError:
        raise
    except Exception as exc:
        if error_score == "raise":
            raise
        text = str(exc) if isinstance(exc, ScoringError) else traceback.format_exc()
        return {}, {}, text
    trained: dict[str, float] = {}
    if train is not None:
        try:
            trained = score(scorer, estimator, train[0], train[1], multimetric, train[2])
        except TrialTimeoutError:
            raise
        except Exception:
            if error_score == "raise":
                raise
    return tested, trained, None
