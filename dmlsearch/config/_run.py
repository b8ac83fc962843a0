"""Running a file: the search (with its ensemble) or the training job it describes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import ConfigError, Problem
from ._ensemble import EnsembleSection
from .build import (
    _search_of,
    _train_of,
    build_search,
    build_trainer,
    load_data,
    make_registry,
    open_client,
)
from .schema import ExperimentConfig

if TYPE_CHECKING:
    from ..search import SearchCV
    from ..training import DataParallelTrainer

__all__ = ["run_experiment", "run_training"]


def _taken(cfg: ExperimentConfig, registry: Any, overwrite: bool, resume_hint: str = "") -> bool:
    """Whether the registry holds experiment ``name``; refused unless ``overwrite``."""
    from ..registry import NotFoundError

    try:
        existing = registry.experiment(cfg.name)
    except NotFoundError:
        return False
    if overwrite:
        from .._experiment import check_not_running

        check_not_running(registry.store, existing, "overwrite")
    else:
        raise ConfigError(
            [
                Problem(
                    "name",
                    f"experiment {cfg.name!r} already exists in {registry.shown_url}; {resume_hint}"
                    "`dmlsearch run --overwrite` (overwrite=True) replaces it, or pick another "
                    "name (--set name=...)",
                )
            ]
        )
    return True


def _one_of(resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise ConfigError(
            [Problem("", "resume continues an experiment and overwrite deletes it: pick one")]
        )


def _delete(
    cfg: ExperimentConfig,
    registry: Any,
    on_overwrite: Callable[[dict[str, Any]], None] | None,
) -> None:
    deleted = registry.delete_experiment(cfg.name, force=True)  # checked before
    if on_overwrite is not None:
        on_overwrite(deleted)


def run_experiment(
    cfg: ExperimentConfig,
    *,
    resume: bool = False,
    progress: bool | None = None,
    registry_url: str | None = None,
    overwrite: bool = False,
    on_overwrite: Callable[[dict[str, Any]], None] | None = None,
    on_ensemble: Callable[[Any, Any], None] | None = None,
) -> SearchCV:
    """Load the data, open the cluster and the registry, run the search; returns it fitted.

    A new run refuses an experiment name the registry already holds (``resume=True``
    continues it instead), before any cluster is started. ``overwrite=True`` deletes that
    experiment instead (:meth:`Registry.delete_experiment`), once the data is loaded and the
    cluster is open, so that a file that cannot run leaves it as it was; ``on_overwrite``
    receives the deletion's summary. With an ``ensemble:`` section, the selection and its
    registered version are passed to ``on_ensemble`` once registered.
    """
    _search_of(cfg)  # a training job's file: refused before anything starts
    _one_of(resume, overwrite)
    with make_registry(cfg, registry_url) as registry:
        exists = not resume and _taken(
            cfg, registry, overwrite, "`dmlsearch resume` (resume=True) continues it, "
        )
        X, y = load_data(cfg)
        _check_rows(cfg, X, y)
        _check_text_columns(cfg, X)
        with open_client(cfg) as client:
            if exists:
                _delete(cfg, registry, on_overwrite)
            search = build_search(
                cfg, client=client, registry=registry, progress=progress, resume=resume
            )
            search.fit(X, y)
            if cfg.ensemble is not None:
                _select_ensemble(cfg, cfg.ensemble, search, X, y, client, registry, on_ensemble)
    return search


def _check_rows(cfg: ExperimentConfig, X: Any, y: Any) -> None:
    """ConfigError naming the data for no rows or missing target values, before a cluster
    starts: else the search's split fails, naming ``cv``."""
    from sklearn.utils.validation import _num_samples

    from .._validation import describe_rows, missing_target_rows

    data = cfg.data
    if data.path is not None:
        where, source = "data.path", Path(data.path).name
    elif data.loader is not None:
        where, source = "data.loader", f"{data.loader}(...)"
    else:
        return  # scikit-learn's datasets: rows and targets
    try:
        empty = _num_samples(X) == 0
    except TypeError:
        return  # not array-like: the search says so
    if empty:
        raise ConfigError([Problem(where, f"the data has no rows: {source} holds none")])
    rows = missing_target_rows(y)
    if rows.size:
        count = f"{len(rows)} missing value{'s' if len(rows) > 1 else ''}"
        at = f"{describe_rows(rows)}; data rows counted from 0"
        if data.path is not None:
            problem = Problem(
                "data.target",
                f"{data.target!r} has {count} ({at}): fill them in, or drop those rows",
            )
        else:
            problem = Problem(where, f"the y it returns has {count} ({at}): drop those rows")
        raise ConfigError([problem])


def _check_text_columns(cfg: ExperimentConfig, X: Any) -> None:
    """ConfigError at ``data`` for columns of text, categories that are not numbers, or dates
    given to a scikit-learn model that takes numbers only (no Pipeline, ColumnTransformer or
    FeatureUnion to encode them), before a cluster starts: else every trial fails on a
    worker with the same error."""
    dtypes = getattr(X, "dtypes", None)
    if cfg.model is None or dtypes is None or getattr(X, "ndim", 0) != 2:
        return
    from .build import build_model

    estimator = build_model(cfg)
    if not type(estimator).__module__.startswith("sklearn.") or any(
        hasattr(v, "steps") or hasattr(v, "transformers") or hasattr(v, "transformer_list")
        for v in [estimator, *estimator.get_params(deep=True).values()]
    ):
        return  # it may encode them, or take them as they are (other libraries' models)
    # HistGradientBoosting* takes a pandas category column as it is (categorical_features).
    takes_categories = estimator.get_params().get("categorical_features") == "from_dtype"
    found: dict[str, list[str]] = {}
    for column, dtype in dtypes.items():
        kind = _not_numbers(X[column], dtype, takes_categories)
        if kind is not None:
            found.setdefault(kind, []).append(str(column))
    if not found:
        return
    model = type(estimator).__name__
    sentences = []
    for kind, columns in found.items():
        shown = ", ".join(repr(c) for c in columns[:5]) + (", ..." if len(columns) > 5 else "")
        what = f"columns {shown} hold" if len(columns) > 1 else f"column {shown} holds"
        sentences.append(f"{what} {kind}")
    encode = (
        "make the model a Pipeline that encodes them (a ColumnTransformer with a OneHotEncoder)"
        if "text" in found
        else ""
    )
    dates = (
        "turn them into numbers first (a data.loader returning, say, days since a date)"
        if set(found) - {"text"}
        else ""
    )
    fixes = ", or ".join(
        f for f in ("list the numeric columns in data.features", encode, dates) if f
    )
    path = "data.features" if cfg.data.path is not None else "data"
    raise ConfigError(
        [Problem(path, f"{' and '.join(sentences)}, and {model} takes numbers: {fixes}")]
    )


def _not_numbers(values: Any, dtype: Any, takes_categories: bool) -> str | None:
    """What a column holds that a scikit-learn model of numbers cannot take: "text",
    "dates" or "durations"; None for numbers (and numbers written as text, which
    scikit-learn converts)."""
    import pandas as pd

    types = pd.api.types
    if types.is_datetime64_any_dtype(dtype) or isinstance(dtype, pd.PeriodDtype):
        return "dates"
    if types.is_timedelta64_dtype(dtype):
        return "durations"
    if isinstance(dtype, pd.CategoricalDtype):
        # Converted to an array, the column holds its categories: numbers (or True/False)
        # are taken, anything else (numbers written as text too) fails in fit or predict.
        if takes_categories:
            return None
        used = values.cat.remove_unused_categories().cat.categories
        if len(used) == 0 or types.is_numeric_dtype(used.dtype):
            return None
        return _not_numbers(pd.Series(used), used.dtype, False) or "text"
    if types.is_object_dtype(dtype) or types.is_string_dtype(dtype):
        numbers = pd.to_numeric(values, errors="coerce")
        if int(numbers.isna().sum()) > int(values.isna().sum()):
            return "text"
    return None


def _select_ensemble(
    cfg: ExperimentConfig,
    section: EnsembleSection,
    search: SearchCV,
    X: Any,
    y: Any,
    client: Any,
    registry: Any,
    on_ensemble: Callable[[Any, Any], None] | None,
) -> None:
    """The ``ensemble:`` section: select over the search's trials, register the result."""
    from ..ensemble import EnsembleSelection, register_ensemble

    selection = EnsembleSelection(search, client=client, **section.selection_kwargs()).fit(X, y)
    record = register_ensemble(
        registry,
        section.model_name or f"{cfg.name}-ensemble",
        selection,
        experiment=cfg.name,
        metrics={"oof_score": selection.oof_score_},
    )
    if on_ensemble is not None:
        on_ensemble(selection, record)


def run_training(
    cfg: ExperimentConfig,
    *,
    resume: bool = False,
    progress: bool | None = None,
    registry_url: str | None = None,
    overwrite: bool = False,
    on_overwrite: Callable[[dict[str, Any]], None] | None = None,
) -> DataParallelTrainer:
    """Load the data, open the cluster and the registry, train; returns the fitted trainer.

    The job is recorded as experiment ``name`` (kind ``train``) and its model registered
    as ``train.model_name`` (default ``name``), linked to it. A name the registry already
    holds is refused before any cluster starts, unless ``overwrite=True`` (then it is
    deleted once the data is loaded and the cluster is open, as :func:`run_experiment`
    does); ``resume=True`` continues that job from its last checkpoint instead (a job
    that is not there, or a search's, is refused, and a finished one raises
    JobCompleteError, before any cluster starts). With ``progress`` (default: when stderr
    is a terminal), the Dask dashboard's links are printed on stderr: its ``/dmlsearch``
    page shows the job live.
    """
    from ..dashboard import page_link
    from ..progress import make_progress
    from ..runner.cluster import resolve_client

    _train_of(cfg)  # a search's file: refused before anything starts
    _one_of(resume, overwrite)
    with make_registry(cfg, registry_url) as registry:
        if resume:
            from ..training._resume import check_resumable

            check_resumable(registry, cfg.name, _train_of(cfg).epochs)
        exists = not resume and _taken(
            cfg, registry, overwrite, "`dmlsearch resume` (resume=True) continues it, "
        )
        X, y = load_data(cfg)
        with open_client(cfg) as opened, resolve_client(opened) as client:
            if exists:
                _delete(cfg, registry, on_overwrite)
            link = getattr(client, "dashboard_link", None)
            if link:
                shown = make_progress(progress)
                shown.message(f"Dask dashboard: {link}")
                shown.message(f"dmlsearch page: {page_link(link)}")
            trainer = build_trainer(cfg, client=client, registry=registry, resume=resume)
            trainer.fit(X, y)
    return trainer
