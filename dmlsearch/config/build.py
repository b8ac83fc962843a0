"""Builders: data, model, cv, registry, client, the search and the training job."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidParameterError
from ._common import ConfigError, Problem, _known, _Problems, _suggest
from ._data_model import (
    DataSection,
    ModelSection,
    _build_model,
    _csv_kwargs,
    _infer_format,
    _sklearn_datasets,
)
from ._imports import _build_spec, _import
from ._load import _format_path
from ._train import TrainSection
from .schema import ExperimentConfig, LocalClusterSection, SearchSection, _dimensions

if TYPE_CHECKING:
    from distributed import Client

    from ..registry import Registry
    from ..search import SearchCV
    from ..training import DataParallelTrainer


# -- builders ------------------------------------------------------------------------------


def _build_checked(build: Any) -> Any:
    problems = _Problems()
    obj = build(problems)
    if problems:
        raise ConfigError([Problem(_format_path(loc), msg) for loc, msg, _ in problems.items])
    return obj


def _search_of(cfg: ExperimentConfig) -> tuple[ModelSection, SearchSection]:
    """The file's ``model`` and ``search``; a training job's file has neither."""
    if cfg.model is None or cfg.search is None:
        raise ConfigError(
            [
                Problem(
                    "train",
                    "this file describes a training job, not a search: build_trainer and "
                    "run_training run it (`dmlsearch run` does)",
                )
            ]
        )
    return cfg.model, cfg.search


def _train_of(cfg: ExperimentConfig) -> TrainSection:
    """The file's ``train`` section; a search's file has none."""
    if cfg.train is None:
        raise ConfigError(
            [
                Problem(
                    "search",
                    "this file describes a search, not a training job: build_search and "
                    "run_experiment run it (`dmlsearch run` does)",
                )
            ]
        )
    return cfg.train


def build_model(cfg: ExperimentConfig) -> Any:
    """A fresh, unfitted estimator as ``model`` describes it."""
    model, _ = _search_of(cfg)
    return _build_checked(lambda problems: _build_model(model, problems, None))


def build_cv(cfg: ExperimentConfig) -> Any:
    """``search.cv``: a number of folds, or a fresh splitter."""
    cv = _search_of(cfg)[1].cv
    if isinstance(cv, int):
        return cv
    return _build_checked(lambda problems: _build_spec(cv, ("search", "cv"), problems, None))


def load_data(cfg: ExperimentConfig) -> tuple[Any, Any]:
    """``(X, y)`` as ``data`` says: a scikit-learn dataset, a CSV/Parquet file or a loader."""
    data = cfg.data
    if data.dataset is not None:
        name = data.dataset.rpartition(":")[2]
        func = _sklearn_datasets()[name]
        try:
            if name.startswith("load_"):
                X, y = func(return_X_y=True, **data.kwargs)
            else:
                out = func(**data.kwargs)
                X, y = out[0], out[1]
        except Exception as exc:
            raise _call_failed(
                "data.kwargs" if data.kwargs else "data.dataset", name, exc
            ) from None
        return X, y
    if data.path is not None:
        return _read_table(data)
    assert data.loader is not None
    func = _import(data.loader, None)
    try:
        out = func(**data.kwargs)
    except Exception as exc:
        raise _call_failed("data.loader", data.loader, exc) from None
    if not isinstance(out, tuple) or len(out) != 2:
        raise ConfigError(
            [
                Problem(
                    "data.loader",
                    f"{data.loader} must return a tuple (X, y), got {type(out).__name__}",
                )
            ]
        )
    return out


def _call_failed(path: str, name: str, exc: Exception) -> ConfigError:
    """A data function that raised, as a problem at ``path`` (its arguments or itself)."""
    what = "the arguments in data.kwargs" if path == "data.kwargs" else "it"
    return ConfigError(
        [
            Problem(
                path,
                f"{name}(...) failed: {type(exc).__name__}: {str(exc).rstrip('.')}; fix {what}",
            )
        ]
    )


def _read_table(data: DataSection) -> tuple[Any, Any]:
    import pandas as pd

    assert data.path is not None and data.target is not None
    fmt = data.format or _infer_format(data.path)
    try:
        if fmt == "parquet":
            frame = pd.read_parquet(data.path, **data.read_kwargs)
        else:
            frame = pd.read_csv(data.path, **_csv_kwargs(data.path, data.read_kwargs))
    except FileNotFoundError:
        raise ConfigError([Problem("data.path", f"no such file: {data.path}")]) from None
    except ImportError as exc:
        raise ConfigError(
            [Problem("data.format", f"reading {fmt} needs an extra package: {exc}")]
        ) from None
    except Exception as exc:
        raise ConfigError(
            [Problem("data.path", f"cannot read {data.path}: {type(exc).__name__}: {exc}")]
        ) from None
    if data.target not in frame.columns:
        columns = [str(c) for c in frame.columns]
        raise ConfigError(
            [
                Problem(
                    "data.target",
                    f"no column {data.target!r}{_suggest(data.target, columns)} "
                    f"(columns: {_known(columns)})",
                )
            ]
        )
    if data.features is not None:
        missing = [c for c in data.features if c not in frame.columns]
        if missing:
            raise ConfigError([Problem("data.features", f"no column(s) {missing} in {data.path}")])
        return frame[list(data.features)], frame[data.target]
    X = frame.drop(columns=[data.target])
    if X.shape[1] == 0:
        raise ConfigError(
            [
                Problem(
                    "data.target",
                    f"the only column of {data.path} is the target {data.target!r}: there is "
                    "no feature column to learn from",
                )
            ]
        )
    return X, frame[data.target]


def make_registry(cfg: ExperimentConfig, url: str | None = None) -> Registry:
    """The registry ``registry`` names (``url`` overrides it); close it when done."""
    from ..registry import Registry

    section = cfg.registry
    return Registry(url or section.url, section.artifacts, storage_options=section.storage_options)


@contextmanager
def open_client(cfg: ExperimentConfig) -> Iterator[Client | None]:
    """A client on the cluster ``cluster`` describes, closed (with what it started) on exit.

    Yields None when the file has no ``cluster`` section: the search then starts its
    embedded LocalCluster. An unreachable address raises ConfigError.
    """
    section = cfg.cluster
    if section is None:
        yield None
        return
    from distributed import Client

    if section.address is not None:
        from ..runner.cluster import check_is_scheduler

        timeout = section.connect_timeout
        try:
            check_is_scheduler(section.address, float(timeout))
            client = Client(section.address, set_as_default=False, timeout=f"{timeout}s")
        except (OSError, TimeoutError) as exc:
            raise ConfigError(
                [
                    Problem(
                        "cluster.address",
                        f"cannot reach a Dask scheduler at {section.address} "
                        f"({_why_unreachable(exc, float(timeout))}); start one with "
                        "`dask scheduler` or fix the address",
                    )
                ]
            ) from None
        except InvalidParameterError as exc:  # reached, but no scheduler answered
            message = str(exc).removeprefix(f"{exc.param}: ")
            raise ConfigError([Problem("cluster.address", message)]) from None
        try:
            yield client
        finally:
            client.close()
        return
    cluster: Any
    if section.local is not None:
        cluster = _start_local(section.local)
    else:
        assert section.cls is not None
        cls = _import(section.cls, None)
        cluster = cls(**section.kwargs)
        try:
            if section.scale is not None:
                cluster.scale(section.scale)
            elif section.adapt is not None:
                cluster.adapt(minimum=section.adapt.minimum, maximum=section.adapt.maximum)
        except BaseException:
            cluster.close()
            raise
    try:
        client = Client(cluster, set_as_default=False)
    except BaseException:
        cluster.close()
        raise
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def _start_local(local: LocalClusterSection) -> Any:
    from ..runner import start_local_cluster

    extra = {} if local.memory_limit is None else {"memory_limit": local.memory_limit}
    return start_local_cluster(local.n_workers, local.threads_per_worker, **extra)


def build_search(
    cfg: ExperimentConfig,
    *,
    client: Any = None,
    registry: Any = None,
    progress: bool | None = None,
    resume: bool = False,
) -> SearchCV:
    """A ``SearchCV`` as ``model`` and ``search`` describe, recording as experiment ``name``.

    ``client``: what :func:`open_client` yielded (None: the embedded default). ``registry``:
    a Registry (default: :func:`make_registry`, closed by the caller via
    ``search.registry.close()``).
    """
    from ..search import SearchCV

    s = _search_of(cfg)[1]
    return SearchCV(
        build_model(cfg),
        s.space,
        strategy=s.strategy,
        n_trials=s.n_trials,
        cv=build_cv(cfg),
        scoring=s.scoring,
        refit=s.refit,
        error_score=s.error_score,
        return_train_score=s.return_train_score,
        random_state=s.random_state,
        client=client,
        max_concurrent_trials=s.max_concurrent_trials,
        trial_timeout=s.trial_timeout,
        time_budget=s.time_budget,
        time_budget_policy=s.time_budget_policy,
        max_retries=s.max_retries,
        workers_per_trial=s.workers_per_trial,
        progress=progress,
        registry=registry if registry is not None else make_registry(cfg),
        experiment_name=cfg.name,
        resume=resume,
        keep_oof=cfg.ensemble is not None,
        **(cfg.scheduler.search_kwargs() if cfg.scheduler is not None else {}),
    )


def build_trainer(
    cfg: ExperimentConfig, *, client: Any = None, registry: Any = None, resume: bool = False
) -> DataParallelTrainer:
    """A ``DataParallelTrainer`` as ``train`` describes it, recorded as experiment ``name``
    (``resume``: continuing that job from its last checkpoint).

    ``client``: what :func:`open_client` yielded (None: the default client, else an
    embedded LocalCluster). ``registry``: where the job is recorded and its model registered
    (as ``train.model_name``, default the experiment's name); None: neither.
    """
    from ..training import DataParallelTrainer

    train = _train_of(cfg)
    return DataParallelTrainer(
        **train.trainer_kwargs(),
        client=client,
        registry=registry,
        model_name=train.model_name or cfg.name,
        experiment_name=cfg.name,
        resume=resume,
    )


def summary(cfg: ExperimentConfig) -> dict[str, Any]:
    """A JSON-friendly outline of a validated file (what ``dmlsearch validate`` prints)."""
    data = cfg.data
    source = data.dataset or data.path or data.loader
    cluster: dict[str, Any]
    c = cfg.cluster
    if c is None:
        cluster = {"kind": "embedded"}
    elif c.address is not None:
        cluster = {"kind": "address", "address": c.address}
    elif c.local is not None:
        cluster = {"kind": "local", **c.local.model_dump()}
    else:
        cluster = {"kind": "class", "class": c.cls, "scale": c.scale}
    common = {"version": cfg.version, "kind": cfg.kind, "name": cfg.name, "data": source}
    from ..registry.registry import shown_url

    # Printed for scripts and CI logs: never the password.
    url = cfg.registry.url
    where = {"cluster": cluster, "registry": None if url is None else shown_url(url)}
    if cfg.train is not None:
        t = cfg.train
        named = t.outline()
        return {
            **common,
            "model": named["model"],
            "train": {
                "loss": named["loss"],
                "optimizer": named["optimizer"],
                "epochs": t.epochs,
                "batch_size": t.batch_size,
                "sync": t.sync,
                "n_workers": t.n_workers,
                "model_name": t.model_name or cfg.name,
            },
            **where,
        }
    model, search = _search_of(cfg)
    names = sorted({str(loc[-1]) for loc, _ in _dimensions(search.space)})
    return {
        **common,
        "model": model.cls or "sklearn.pipeline.Pipeline",
        "steps": list(model.steps) if model.steps is not None else None,
        "parameters": names,
        "strategy": search.strategy,
        "n_trials": search.n_trials,
        "time_budget": search.time_budget,
        "cv": search.cv if isinstance(search.cv, int) else search.cv.get("class"),
        "scoring": search.scoring,
        "scheduler": None if cfg.scheduler is None else cfg.scheduler.search_kwargs(),
        "ensemble": None if cfg.ensemble is None else cfg.ensemble.model_dump(),
        **where,
    }


def _why_unreachable(exc: BaseException, timeout: float) -> str:
    """``connection refused: nothing listens there`` at once, or ``no answer within 5s``."""
    refused = isinstance(exc, ConnectionRefusedError) or "refused" in str(exc).lower()
    if refused:
        return "connection refused: nothing listens on that port"
    return f"no answer within {timeout:g}s ({type(exc).__name__})"
