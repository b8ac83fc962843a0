"""Driver-side checks of candidates, before any work is sent to the cluster.

``check_candidate`` tells whether every parameter NAME of a candidate is one the estimator
accepts, with the estimators that the candidate itself swaps in (a Pipeline step replaced
by a ``Categorical`` of estimators, say) taken into account. A name that ``get_params``
does not list but ``set_params`` takes (xgboost's ``**kwargs`` such as ``eta``, skorch's
``module__h``) is accepted, as scikit-learn's searches accept it. The answer is cached by
the shape of the candidate (its names, and the types of its estimator-valued parameters),
so a runner can call it for every candidate at negligible cost.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Collection, Iterable, Mapping, MutableMapping
from itertools import islice, product
from typing import Any

import numpy as np

from .exceptions import InvalidParameterError
from .space import Categorical, SearchSpace

__all__ = [
    "CandidateCache",
    "check_candidate",
    "check_cv",
    "check_fit_data",
    "check_search_params",
    "check_space_names",
    "cv_splits",
    "describe_rows",
    "final_step",
    "missing_target_rows",
    "set_params_accepts",
]

#: Shape of a candidate -> None (its names are valid) or the message of the error.
CandidateCache = MutableMapping[tuple[Any, ...], str | None]

#: How many combinations of estimator-valued choices ``check_space_names`` tries per sub-space.
_MAX_COMBINATIONS = 64


def _is_estimator(value: Any) -> bool:
    return hasattr(value, "get_params") and not isinstance(value, type)


def _holds_estimators(value: Any) -> bool:
    """A list of steps / estimators (``Pipeline.steps``, ``VotingClassifier.estimators``)."""
    if not isinstance(value, (list, tuple)):
        return False
    return any(
        _is_estimator(item) or (isinstance(item, tuple) and any(map(_is_estimator, item)))
        for item in value
    )


def _shape(params: Mapping[str, Any]) -> tuple[Any, ...]:
    shape: list[tuple[str, Any]] = []
    for key in sorted(params):
        value = params[key]
        if _is_estimator(value):
            shape.append((key, type(value)))
        elif _holds_estimators(value):
            shape.append((key, "steps"))
        else:
            shape.append((key, None))
    return tuple(shape)


def _names(estimator: Any, params: Mapping[str, Any]) -> set[str]:
    """The parameter names of ``estimator`` once ``params`` has swapped its estimators in."""
    names = set(estimator.get_params(deep=True))
    # Shallow keys first: swapping ``clf`` decides what ``clf__C`` may name.
    for key in sorted(params, key=lambda k: (k.count("__"), k)):
        if key not in names:
            continue
        prefix = key + "__"
        value = params[key]
        names = {n for n in names if not n.startswith(prefix)}
        if _is_estimator(value):
            names.update(prefix + n for n in value.get_params(deep=True))
    return names


#: How close a name taken by ``**kwargs`` must be to a known parameter to count as its
#: misspelling: no xgboost booster parameter or alias comes within 0.8 of the scikit-learn
#: wrapper's parameters, and ``max_dept``, ``learning_rat``, ``subsampel`` are above 0.85.
MISSPELT_CUTOFF = 0.85


def close_parameter(name: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` that ``name`` misspells (within :data:`MISSPELT_CUTOFF`), or None."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=MISSPELT_CUTOFF)
    return close[0] if close else None


def misspelt(estimator: Any, name: str) -> str | None:
    """The parameter ``name`` (``clf__max_dept``) misspells, at its level of
    ``estimator.get_params(deep=True)`` (``clf__max_depth``), or None.

    An estimator taking any keyword (xgboost's ``**kwargs``) sets a misspelt name without
    a word, and the model ignores it: the run is not the experiment written.
    """
    try:
        known = set(estimator.get_params(deep=True))
    except Exception:  # no get_params: nothing to compare with
        return None
    if name in known:
        return None
    owner, _, leaf = name.rpartition("__")
    prefix = f"{owner}__" if owner else ""
    level = [k[len(prefix) :] for k in known if k.startswith(prefix)]
    level = [k for k in level if "__" not in k]
    close = close_parameter(leaf, level)
    return None if close is None else f"{prefix}{close}"


def set_params_accepts(estimator: Any, params: Mapping[str, Any], name: str) -> bool:
    """Whether ``set_params`` takes ``name`` on a clone of ``estimator``, once what
    ``params`` puts at its owners (``clf`` for ``clf__C``) and its steps are set.

    ``get_params`` of a fresh estimator is not the whole story: ``**kwargs`` parameters
    and skorch's ``module__*``/``optimizer__*`` appear there only once set.
    """
    from sklearn.base import clone

    def copied(value: Any) -> Any:  # set_params must not change the caller's estimators
        if _is_estimator(value) or _holds_estimators(value):
            return clone(value, safe=False)
        return value

    if misspelt(estimator, name) is not None:
        return False  # set_params would take it (**kwargs) and the model ignore it
    context = {
        key: copied(value)
        for key, value in params.items()
        if name.startswith(key + "__") or (key != name and _holds_estimators(value))
    }
    try:
        clone(estimator).set_params(**context, **{name: copied(params.get(name))})
    except Exception:  # whatever set_params raises, the name cannot be set
        return False
    return True


def _unknown(estimator: Any, params: Mapping[str, Any], names: set[str]) -> list[str]:
    unknown = [key for key in params if key not in names]
    if any(_holds_estimators(params[key]) for key in params):
        # A candidate that sets a list of steps renames what nested names refer to:
        # only its top-level names can be checked here.
        unknown = [key for key in unknown if "__" not in key]
    return [key for key in unknown if not set_params_accepts(estimator, params, key)]


def _message(estimator: Any, params: Mapping[str, Any], unknown: list[str], names: set[str]) -> str:
    parts = []
    for name in unknown:
        prefix = name.rpartition("__")[0]
        # Siblings: the names at the same level as the unknown one.
        level = sorted(
            n
            for n in names
            if n.rpartition("__")[0] == prefix and n.count("__") == name.count("__")
        )
        if prefix and not level and prefix in names:
            value = f" ({prefix}={params[prefix]!r})" if prefix in params else ""
            parts.append(f"{name!r} is not a parameter: {prefix!r} has none{value}")
            continue
        if prefix and not level:
            # The owner itself is unknown: say so at the top level, where the typo is.
            top = name.split("__")[0]
            level = sorted(n for n in names if "__" not in n)
            close = difflib.get_close_matches(top, level, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            shown = ", ".join(level[:25]) + (", ..." if len(level) > 25 else "")
            parts.append(
                f"{name!r}: {type(estimator).__name__} has no step or parameter {top!r}{hint} "
                f"(it has: {shown})"
            )
            continue
        close = difflib.get_close_matches(name, level, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        owner = f"the {prefix!r} step/parameter" if prefix else type(estimator).__name__
        shown = ", ".join(level[:25]) + (", ..." if len(level) > 25 else "")
        parts.append(f"{name!r} is not a parameter of {owner}{hint} (it has: {shown or 'none'})")
    swapped = [f"{k}={v!r}" for k, v in params.items() if _is_estimator(v)]
    context = f" when {', '.join(swapped)}" if swapped else ""
    return (
        f"{'; '.join(parts)}{context}. Fix the name in search_space, or give each estimator "
        "choice its own sub-space (a list of dicts) with the parameters it has"
    )


def check_candidate(
    estimator: Any, params: Mapping[str, Any], cache: CandidateCache | None = None
) -> None:
    """Raise ``InvalidParameterError('search_space', ...)`` if a name in ``params`` is not
    a parameter of ``estimator``; remember the answer in ``cache`` by the candidate's shape.

    Names only are checked (values are the estimator's to validate, at fit). A nested name
    (``clf__C``) is checked against the estimator the candidate puts at ``clf`` when it
    sets one, else against the estimator's own step.
    """
    if not callable(getattr(estimator, "get_params", None)):
        return  # not a scikit-learn estimator: nothing to check names against
    key = _shape(params)
    if cache is not None and key in cache:
        message = cache[key]
    else:
        names = _names(estimator, params)
        unknown = _unknown(estimator, params, names)
        message = _message(estimator, params, unknown, names) if unknown else None
        if cache is not None:
            cache[key] = message
    if message is not None:
        raise InvalidParameterError("search_space", message)


def _representatives(dim: Any) -> list[Any]:
    """One value per kind of choice: each estimator type, and one non-estimator value."""
    if not isinstance(dim, Categorical):
        return [None]
    out: list[Any] = []
    seen: set[Any] = set()
    for choice in dim.choices:
        kind: Any = None
        if _is_estimator(choice):
            kind = type(choice)
        elif _holds_estimators(choice):
            kind = "steps"
        if kind not in seen:
            seen.add(kind)
            out.append(choice)
    return out


def check_space_names(
    estimator: Any, space: SearchSpace, cache: CandidateCache | None = None
) -> None:
    """Check the names of every sub-space of ``space`` before a search starts.

    Each sub-space is checked once per combination of the kinds of its estimator-valued
    choices (at most 64 combinations; beyond, the runner's per-candidate check covers the
    rest), with placeholders for the other values.
    """
    for sub in space.subspaces:
        keys = sorted(sub)
        options = [_representatives(sub[key]) for key in keys]
        for combo in islice(product(*options), _MAX_COMBINATIONS):
            check_candidate(estimator, dict(zip(keys, combo, strict=True)), cache)


# -- SearchCV's own parameters ------------------------------------------------------------------


def check_cv(cv: Any) -> None:
    """``cv`` as scikit-learn takes it: None, an int >= 2, a splitter or an iterable of splits."""
    if cv is None or (hasattr(cv, "split") and not isinstance(cv, (str, bytes))):
        return
    if isinstance(cv, numbers.Integral) and not isinstance(cv, (bool, np.bool_)):
        if cv < 2:
            raise InvalidParameterError("cv", f"needs at least 2 folds, got cv={cv!r}")
        return
    if isinstance(cv, (str, bytes, Mapping)) or not isinstance(cv, Iterable):
        raise InvalidParameterError(
            "cv",
            "expected an int >= 2, a splitter (KFold(5), say) or a list of (train, test) "
            f"index arrays, got {type(cv).__name__} {cv!r}",
        )
    if isinstance(cv, Collection):  # a generator is read once, by cv_splits
        _check_pairs(cv)


def _check_pairs(splits: Collection[Any]) -> None:
    for i, split in enumerate(splits):
        if (
            isinstance(split, (str, bytes, Mapping))
            or not isinstance(split, Collection)
            or len(split) != 2
        ):
            raise InvalidParameterError(
                "cv", f"split {i}: expected a (train, test) pair of index arrays, got {split!r}"
            )


def check_search_params(search: Any) -> None:
    """What ``SearchCV._validate`` checks before its own checks: the estimator, ``cv``,
    ``return_train_score``."""
    estimator = search.estimator
    if isinstance(estimator, type):
        raise InvalidParameterError(
            "estimator",
            f"got the class {estimator.__name__}, not an estimator: write "
            f"{estimator.__name__}() (with its parameters)",
        )
    check_cv(search.cv)
    if not isinstance(search.return_train_score, (bool, np.bool_)):
        raise InvalidParameterError(
            "return_train_score", f"must be True or False, got {search.return_train_score!r}"
        )


def _check_split(i: int, train: Any, test: Any, n_samples: int) -> tuple[Any, Any]:
    pair = []
    for name, part in (("train", train), ("test", test)):
        idx = np.asarray(part)
        if idx.dtype == bool and idx.shape == (n_samples,):
            idx = np.flatnonzero(idx)
        if idx.ndim != 1 or not (idx.size == 0 or np.issubdtype(idx.dtype, np.integer)):
            raise InvalidParameterError(
                "cv", f"split {i}: {name} must be a 1-d array of row indices, got {part!r}"
            )
        if idx.size == 0:
            raise InvalidParameterError("cv", f"split {i}: the {name} part is empty")
        if idx.min() < -n_samples or idx.max() >= n_samples:
            raise InvalidParameterError(
                "cv", f"split {i}: {name} indices must be in [0, {n_samples}), got {part!r}"
            )
        pair.append(idx)
    return pair[0], pair[1]


# -- the data given to fit ----------------------------------------------------------------------


def _check_not_lazy(name: str, value: Any) -> None:
    """InvalidParameterError for a Dask DataFrame/Series, or a Dask array of unknown length.

    A Dask DataFrame has no length without computing it, and no row indexing (``take``)
    the folds need: it would pass the driver's checks and fail on a worker. A Dask array
    whose chunk sizes are known is indexed by row as NumPy's is, and is taken.
    """
    root = type(value).__module__.partition(".")[0]
    if root not in ("dask", "dask_expr", "dask_cudf"):
        return
    if hasattr(value, "npartitions") and not hasattr(value, "chunks"):
        kind = type(value).__name__
        raise InvalidParameterError(
            name,
            f"a Dask {kind} is not supported (its rows cannot be counted or indexed without "
            f"computing it): pass {name}.compute() (the data is then sent to the workers "
            f"once), or {name}.to_dask_array(lengths=True)",
        )
    chunks = getattr(value, "chunks", None)
    if chunks and any(not np.isfinite(c) for c in chunks[0]):
        raise InvalidParameterError(
            name,
            f"a Dask array with unknown chunk sizes (shape {value.shape}): call "
            f"{name}.compute_chunk_sizes() first, or pass {name}.compute()",
        )


def missing_target_rows(y: Any) -> np.ndarray:
    """The positions of the rows of ``y`` with a missing value (NaN, None, pd.NA, NaT);
    empty for None and for a sparse ``y`` (not checked)."""
    import pandas as pd
    from scipy import sparse

    if y is None or sparse.issparse(y):
        return np.empty(0, dtype=np.intp)
    values = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y)
    if values.ndim == 0 or values.dtype.kind in "biu":
        return np.empty(0, dtype=np.intp)
    # pd.isna for objects (None, pd.NA of nullable dtypes), strings and dates (NaT).
    missing = np.isnan(values) if values.dtype.kind in "fc" else pd.isna(values)
    if missing.ndim > 1:
        missing = missing.reshape(len(missing), -1).any(axis=1)
    return np.flatnonzero(missing)


def describe_rows(rows: np.ndarray, most: int = 10) -> str:
    """``row 3`` / ``rows 3, 7`` / ``rows 3, 7, ... (40 in all)``: positions counted from 0."""
    shown = ", ".join(str(int(r)) for r in rows[:most])
    more = f", ... ({len(rows)} in all)" if len(rows) > most else ""
    return f"row{'s' if len(rows) > 1 else ''} {shown}{more}"


def check_fit_data(X: Any, y: Any, groups: Any = None) -> None:
    """What ``fit`` refuses in its data before any work: a Dask DataFrame or Series (or a
    Dask array of unknown length) as ``X``, ``y`` or ``groups``, an ``X`` with no rows, and
    missing values in ``y`` (InvalidParameterError naming the argument).

    A missing target would fail every fit on the workers, or stop the splitter with an
    error about sorting floats and strings (classes) that names ``cv``.
    """
    for name, value in (("X", X), ("y", y), ("groups", groups)):
        _check_not_lazy(name, value)
    from sklearn.utils.validation import _num_samples

    try:
        n_samples = _num_samples(X)
    except TypeError:
        return  # not array-like: the estimator's own check says so
    if n_samples == 0:
        raise InvalidParameterError("X", "has no rows: pass the data to fit on")
    rows = missing_target_rows(y)
    if rows.size:
        raise InvalidParameterError(
            "y",
            f"has {len(rows)} missing value{'s' if len(rows) > 1 else ''} "
            f"({describe_rows(rows)}, counted from 0): drop those rows from X and y, or "
            "fill them in, before fit",
        )


def cv_splits(
    cv: Any, X: Any, y: Any, groups: Any, *, classifier: bool
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (train, test) index arrays of ``cv`` on this data; InvalidParameterError('cv')
    for a splitter that cannot split it (more folds than rows, say) or a malformed split,
    and what :func:`check_fit_data` refuses in the data (naming it) first."""
    from sklearn.model_selection import check_cv as sklearn_check_cv

    check_cv(cv)
    check_fit_data(X, y, groups)
    if cv is not None and not hasattr(cv, "split") and not isinstance(cv, numbers.Integral):
        cv = list(cv)  # given splits: each must be a pair before scikit-learn unpacks it
        _check_pairs(cv)
    try:
        splitter = sklearn_check_cv(cv, y, classifier=classifier)
        raw = list(splitter.split(X, y, groups))
    except (ValueError, TypeError) as exc:
        raise InvalidParameterError("cv", f"cannot split the data: {exc}") from exc
    if not raw:
        raise InvalidParameterError("cv", "the splitter produced no splits")
    from sklearn.utils.validation import _num_samples

    n_samples = _num_samples(X)
    return [_check_split(i, train, test, n_samples) for i, (train, test) in enumerate(raw)]


def final_step(estimator: Any) -> tuple[str, Any]:
    """A Pipeline's final step (nested ones too) and the prefix of its parameters
    (``"clf__"``); ``("", estimator)`` for anything else. An empty Pipeline is its own."""
    prefix, final = "", estimator
    while isinstance(getattr(final, "steps", None), list) and final.steps:
        name, final = final.steps[-1]
        prefix += f"{name}__"
    return prefix, final
