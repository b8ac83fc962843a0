"""Where ensemble selection finds its library: a fitted SearchCV or a registry experiment.

Either way: the estimator to refit members from, each candidate trial's parameters and
rank, and references to its out-of-fold predictions (read only for the candidates kept).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import is_classifier

from .. import _oof
from .._errors import error_headline
from .._states import COMPLETE
from ..exceptions import AllTrialsFailedError, InvalidParameterError

__all__ = [
    "Candidate",
    "Library",
    "library_of",
    "reader",
    "release_oof",
    "search_refs",
    "trial_predictions",
]


@dataclass(frozen=True)
class Candidate:
    """One trial that may join the ensemble."""

    number: int
    value: float
    params: dict[str, Any]
    ref: _oof.OofRef


@dataclass
class Library:
    """The best ``max_candidates`` trials of a search, best first."""

    estimator: Any
    classifier: bool
    candidates: list[Candidate]
    scoring: Any
    #: The search's classes and row count, when recorded (a registry experiment).
    classes: np.ndarray | None = None
    n_samples: int | None = None
    #: Where worker-memory predictions live (the search's own client), if anywhere.
    client: Any = None
    where: str = "the search"
    #: The fsspec options of the artifact store holding the predictions (never shown).
    storage_options: dict[str, Any] | None = field(default=None, repr=False)


def _best(candidates: list[Candidate], max_candidates: int, where: str) -> list[Candidate]:
    if not candidates:
        raise AllTrialsFailedError(
            f"{where} has no completed trial with out-of-fold predictions: there is "
            "nothing to select an ensemble from"
        )
    # Best first; a NaN objective (a non-finite score) last; ties by trial number.
    ranked = sorted(
        candidates, key=lambda c: (-c.value if math.isfinite(c.value) else math.inf, c.number)
    )
    return ranked[:max_candidates]


def library_of(search: Any, registry: Any, max_candidates: int) -> Library:
    """The library of ``search``: a fitted SearchCV, or an experiment name of ``registry``."""
    if isinstance(search, str):
        return _from_registry(search, registry, max_candidates)
    if registry is not None:
        raise InvalidParameterError(
            "registry", "is only used with search=<experiment name>; a fitted SearchCV knows it"
        )
    if not hasattr(search, "trials_") and not hasattr(search, "keep_oof"):
        raise InvalidParameterError(
            "search",
            f"expected a fitted dmlsearch.SearchCV or a registry experiment name, got "
            f"{type(search).__name__}",
        )
    refs = search_refs(search)
    if not refs and any(t.state == COMPLETE for t in search.trials_):
        # Trials restored by a resume of an experiment that ran without keep_oof.
        raise InvalidParameterError(
            "search",
            "none of the search's completed trials has out-of-fold predictions: trials a "
            "resume restored have them only if their experiment ran with keep_oof=True "
            "(a file: with its ensemble section) from the start; run the experiment again "
            "with it (`dmlsearch run --overwrite`, or a new experiment_name)",
        )
    frame = search.trials_dataframe()
    values = dict(zip(frame["number"], frame["value"], strict=True))
    candidates = [
        Candidate(t.number, float(values[t.number]), t.params, refs[t.number])
        for t in search.trials_
        if t.number in refs
    ]
    scoring = search.scoring
    if search.multimetric_ and isinstance(search.refit, str):
        scoring = scoring[search.refit] if isinstance(scoring, dict) else search.refit
    sink = getattr(search, "_oof_sink", None)  # None from a search fitted before it was kept
    return Library(
        search.estimator,
        is_classifier(search.estimator),
        _best(candidates, max_candidates, "the search"),
        scoring,
        classes=getattr(sink, "classes", None),
        n_samples=getattr(sink, "n_samples", None),
        client=search.client,
        storage_options=search_options(search),
    )


def search_options(search: Any) -> dict[str, Any] | None:
    """The fsspec options of the artifact store a fitted search's workers wrote its
    out-of-fold predictions to (its registry's), if any."""
    return getattr(getattr(search, "_oof_sink", None), "storage_options", None)


def _from_registry(name: str, registry: Any, max_candidates: int) -> Library:
    from ..registry import FormatError, NotFoundError, as_registry

    if registry is None:
        raise InvalidParameterError(
            "registry", f"search={name!r} names an experiment: pass the registry that holds it"
        )
    reg = as_registry(registry)
    try:
        experiment = reg.experiment(name)
        folder = _oof.experiment_folder(reg, experiment)
        options = _oof.options_of(reg)
        meta = _oof.read_meta(reg.artifacts.url, folder, options)
        where = f"experiment {name!r}"
        if meta is None:
            raise InvalidParameterError(
                "search",
                f"{where} was run without keep_oof=True, so no out-of-fold predictions were "
                "kept; run it again as SearchCV(..., keep_oof=True, registry=...)",
            )
        files = _oof.list_files(reg.artifacts.url, folder, options)
        candidates = [
            Candidate(t.number, float(t.value), dict(t.params), files[t.number])
            for t in reg.store.get_trials(experiment.id)
            if t.state == COMPLETE and t.value is not None and t.number in files
        ]
        candidates = _best(candidates, max_candidates, where)
        _check_plain(candidates, experiment.config, where)
        try:
            estimator = reg.load_model(name)
        except NotFoundError:
            raise InvalidParameterError(
                "search",
                f"{where} registered no model (was it run with refit=False?), so the "
                "estimator to refit the members from is unknown; pass the fitted SearchCV",
            ) from None
        except FormatError as exc:
            # A torch net's weights load only into a net of its class, which the registry
            # does not hold: the fitted search does.
            raise InvalidParameterError(
                "search",
                f"the model {where} registered cannot be loaded by itself ({exc}), so the "
                "estimator to refit the members from is unknown; pass the fitted SearchCV "
                "(in the script that ran the search) instead of its experiment name",
            ) from None
        estimator = _as_searched(estimator, candidates, experiment.config, where)
    finally:
        if reg is not registry:
            reg.close()
    classes = meta.get("classes")
    return Library(
        estimator,
        classes is not None,
        candidates,
        _stored_scoring(experiment.config.get("scoring")),
        classes=None if classes is None else np.asarray(classes),
        n_samples=int(meta["n_samples"]),
        where=where,
        storage_options=options,
    )


def _object_keys(config: dict[str, Any]) -> set[str]:
    """The parameters whose recorded search space offers an estimator (or any value that
    is not a JSON scalar) as a choice: the registry records such a trial's value as text."""
    spec = config.get("search_space_spec")
    subspaces = spec if isinstance(spec, list) else [spec]
    keys = set()
    for sub in subspaces:
        for key, dim in sub.items() if isinstance(sub, dict) else ():
            choices = dim.get("choices") if isinstance(dim, dict) else None
            if isinstance(choices, list) and any(isinstance(c, (dict, list)) for c in choices):
                keys.add(key)
    return keys


def _check_plain(candidates: list[Candidate], config: dict[str, Any], where: str) -> None:
    """InvalidParameterError, before any work, where a candidate's parameters hold an
    estimator: the registry has only its text, not the object to refit with."""
    objects = _object_keys(config)
    found = sorted({k for c in candidates for k in c.params if k in objects})
    if found:
        raise InvalidParameterError(
            "search",
            f"{where} searched estimators as values of {found}, which the registry records "
            "only as text, so its trials cannot be refitted from it: pass the fitted "
            "SearchCV (search=the_search) instead of the experiment's name",
        )


def _as_searched(
    estimator: Any, candidates: list[Candidate], config: dict[str, Any], where: str
) -> Any:
    """The registered best model, with the parameters some candidates do not set (a search
    of sub-spaces) put back to the searched estimator's values: a candidate refitted from
    it must not inherit the best trial's values of those."""
    keys = set().union(*(c.params for c in candidates))
    unset = sorted({k for c in candidates for k in keys - c.params.keys()})
    if not unset:
        return estimator
    recorded = config.get("base_params")
    base = recorded if isinstance(recorded, dict) else {}
    unknown = [k for k in unset if k not in base]
    if unknown:
        raise InvalidParameterError(
            "search",
            f"{where}'s trials set different parameters (sub-spaces), and the value the "
            f"searched estimator had for {unknown[:5]} is not recorded (not a plain value, "
            "or an experiment recorded before 2026-12-07), so a trial that did not set it "
            "cannot be refitted as it ran: pass the fitted SearchCV instead",
        )
    from sklearn.base import clone

    return clone(estimator).set_params(**{k: base[k] for k in unset})


def _stored_scoring(text: Any) -> Any:
    """The search's ``scoring`` from the ``repr`` an experiment records: a name or None."""
    try:
        value = ast.literal_eval(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def search_refs(search: Any, param: str = "search") -> dict[int, _oof.OofRef]:
    """The references a fitted SearchCV holds, by trial number (completed trials only).

    Trials restored from the registry by a resume have no reference in memory: their
    files are listed in the experiment's folder.
    """
    if not hasattr(search, "trials_"):
        raise InvalidParameterError(
            param, "the search is not fitted: call its fit(X, y) first (with keep_oof=True)"
        )
    if not getattr(search, "keep_oof", False):
        raise InvalidParameterError(
            param,
            "the search was fitted with keep_oof=False, so it kept no out-of-fold "
            "predictions; fit it again as SearchCV(..., keep_oof=True)",
        )
    complete = {t.number for t in search.trials_ if t.state == COMPLETE}
    refs = {t.number: t.oof for t in search.trials_ if t.oof is not None and t.number in complete}
    if len(refs) < len(complete) and search.registry is not None:
        from ..registry import as_registry

        registry = as_registry(search.registry)
        try:
            folder = _oof.experiment_folder(registry, registry.experiment(search.experiment_name_))
            stored = _oof.list_files(registry.artifacts.url, folder, _oof.options_of(registry))
        finally:
            if registry is not search.registry:
                registry.close()
        refs.update({n: r for n, r in stored.items() if n in complete and n not in refs})
    return refs


def trial_predictions(search: Any, trial: int) -> np.ndarray:
    """``SearchCV.oof_predictions``: one trial's out-of-fold predictions."""
    refs = search_refs(search)
    why = {t.number: t.oof_error for t in search.trials_ if getattr(t, "oof_error", None)}
    if trial in why:
        raise InvalidParameterError(
            "trial",
            f"trial {trial} kept no out-of-fold predictions: {error_headline(why[trial])}",
        )
    if trial not in refs:
        shown = sorted(refs)[:10]
        raise InvalidParameterError(
            "trial",
            f"no out-of-fold predictions for trial {trial!r}: the search kept them for "
            f"completed trials {shown}{' ...' if len(refs) > 10 else ''}",
        )
    with reader(search.client) as client:
        found, lost = _oof.load([refs[trial]], client, search_options(search))
    if lost:
        raise LookupError(
            f"the out-of-fold predictions of trial {trial} are no longer in the memory of "
            f"worker {refs[trial].location} (released with release_oof, or the worker left "
            "the cluster or restarted); a search with a registry keeps them in its artifact "
            "store instead"
        )
    return found[trial][1]


@contextmanager
def reader(client: Any) -> Iterator[Any]:
    """A client on the cluster holding worker-memory predictions (None if there is none)."""
    from distributed import Client

    if isinstance(client, Client):
        yield client
    elif isinstance(client, str):
        with Client(client, set_as_default=False, timeout="10s") as c:
            yield c
    else:
        try:
            yield Client.current()
        except ValueError:
            yield None


def release_oof(search: Any) -> int:
    """Free the out-of-fold predictions that ``search`` keeps in its workers' memory.

    Returns how many trials' predictions were dropped (files in a registry's artifact
    store are left: they go with the experiment's folder).
    """
    refs = search_refs(search)
    with reader(search.client) as client:
        return _oof.release(list(refs.values()), client)
