"""The command line's training jobs: ``run`` of a file with a ``train:`` section, and
``show`` of the experiment it recorded (kind ``train``). See docs/cli.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from shlex import quote
from typing import Any

import typer

from .._jobs import JOB_KIND, is_training_job, job_versions
from ._common import Terminated, _cell, _console, _echo_json, _fail, _table

__all__ = ["is_training_job", "run_training_job", "show_training_job"]

#: What a run prints of each epoch (``history_`` keys), and the column titles.
_COLUMNS = {"epoch": "epoch", "loss": "loss", "samples_per_s": "rows/s", "seconds": "seconds"}


def _epochs_table(history: list[dict[str, Any]], title: str) -> None:
    import pandas as pd

    rows = [{title_: e.get(key) for key, title_ in _COLUMNS.items()} for e in history]
    for row in rows:  # whole rows a second read better than 6.165e+04
        if isinstance(row["rows/s"], float):
            row["rows/s"] = round(row["rows/s"])
    _table(pd.DataFrame(rows, columns=list(_COLUMNS.values())), title=title)


def run_training_job(
    cfg: Any,
    registry: str | None,
    *,
    resume: bool,
    progress: bool,
    json_: bool,
    overwrite: bool,
    on_overwrite: Callable[[dict[str, Any]], None],
) -> None:
    """Train as the file's ``train:`` section says (``resume``: the rest of the job, from
    its last checkpoint); print the epochs and the version."""
    from ..config import run_training
    from ..exceptions import JobCompleteError

    start = time.perf_counter()
    try:
        trainer = run_training(
            cfg,
            resume=resume,
            progress=progress,
            registry_url=registry,
            overwrite=overwrite,
            on_overwrite=on_overwrite,
        )
    except JobCompleteError as exc:
        # As a resumed search with every trial recorded: nothing left to do is no error.
        typer.echo(f"{exc}; `dmlsearch show {quote(exc.experiment)}` for its model", err=True)
        if json_:
            _echo_json({"experiment": exc.experiment, "kind": JOB_KIND, "complete": True})
        return
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        raise _fail(
            f"{'terminated (SIGTERM)' if terminated else 'interrupted'}; the job is recorded "
            "as interrupted, `dmlsearch resume FILE` continues it from its last checkpoint",
            143 if terminated else 130,
        ) from None
    elapsed = time.perf_counter() - start
    version = trainer.model_version_
    history = [{k: e.get(k) for k in _COLUMNS} for e in trainer.history_]
    result = {
        "experiment": cfg.name,
        "experiment_id": trainer.experiment_id_,
        "kind": JOB_KIND,
        "elapsed": elapsed,
        "sync": trainer.sync,
        "world_size": trainer.n_workers_,
        "epochs": history,
        "final_loss": history[-1]["loss"],
        "model": None if version is None else {"name": version.model, "version": version.version},
        "resumed": _resume_of(trainer),
    }
    if json_:
        _echo_json(result)
        return
    console = _console()
    # A resume trains only the epochs after its checkpoint (the history holds them all).
    resumed = result["resumed"]
    trained = (
        f"trained {len(history)} epochs"
        if resumed is None
        else f"{len(history)} epochs, {max(len(history) - int(resumed['epoch']), 0)} "
        "trained in this run,"
    )
    console.print(
        f"[bold]{cfg.name}[/bold]: {trained} on {trainer.n_workers_} "
        f"workers (sync {trainer.sync}) in {elapsed:.1f}s; final loss "
        f"[bold]{_cell(result['final_loss'])}[/bold]"
    )
    if result["resumed"] is not None:
        console.print(_resumed_line(result["resumed"], len(history)))
    _epochs_table(history, f"epochs of {cfg.name}")
    if version is not None:
        console.print(
            f"registered model {version.model} v{version.version}; "
            f"`dmlsearch show {quote(cfg.name)}` for the job"
        )


def _resume_of(trainer: Any) -> dict[str, Any] | None:
    """This run's resume of the job (``epoch``, ``checkpoint``), or None for a new job."""
    resumed = [r for r in trainer.resumed_ if "checkpoint" in r]
    return None if not resumed else {k: resumed[0][k] for k in ("epoch", "checkpoint")}


def _resumed_from(resumed: dict[str, Any]) -> str:
    """Where a resume started: ``from the checkpoint of epoch 2 (ab12...)``."""
    if resumed.get("checkpoint") is None:
        return "with no checkpoint recorded, from epoch 0"
    return f"from the checkpoint of epoch {resumed['epoch']} ({str(resumed['checkpoint'])[:12]})"


def _resumed_line(resumed: dict[str, Any], epochs: int) -> str:
    first = int(resumed["epoch"])
    done = f"epochs {first + 1}..{epochs} trained now" if first < epochs else "none left to train"
    return f"resumed {_resumed_from(resumed)}: {done}"


def _job_versions(reg: Any, exp: Any) -> list[dict[str, Any]]:
    """The versions registered from training job ``exp``, oldest first."""
    return [
        {
            "name": v.model,
            "version": v.version,
            "epochs": v.lineage.get("epochs"),
            "final_loss": v.metrics.get("loss"),
            "samples_per_s": v.metrics.get("samples_per_s"),
            "sync": v.lineage.get("sync"),
            "world_size": v.lineage.get("world_size"),
        }
        for v in job_versions(reg, exp)
    ]


def show_training_job(reg: Any, exp: Any, json_: bool) -> None:
    """``dmlsearch show`` of a training job: its settings and its model version(s)."""
    versions = _job_versions(reg, exp)
    hidden = ("source", "checkpoint", "resumes")
    config = {k: v for k, v in exp.config.items() if k not in hidden}
    last = exp.config.get("checkpoint")
    checkpoint = (
        None if not isinstance(last, dict) else {k: last.get(k) for k in ("epoch", "sha256")}
    )
    resumes = list(exp.config.get("resumes", []))
    if json_:
        _echo_json(
            {
                "experiment": exp.name,
                "id": exp.id,
                "status": exp.status,
                "kind": JOB_KIND,
                "config": config,
                "checkpoint": checkpoint,
                "resumes": resumes,
                "models": versions,
            }
        )
        return
    typer.echo(
        f"{exp.name} (id {exp.id}, {exp.status}): training job of {config.get('module')}, "
        f"{config.get('epochs')} epochs on {config.get('n_workers')} workers, "
        f"sync {config.get('sync')}"
    )
    for r in resumes:
        typer.echo(f"resumed {_resumed_from(r)}")
    if checkpoint is not None:
        typer.echo(
            f"last checkpoint: epoch {checkpoint['epoch']} ({str(checkpoint['sha256'])[:12]}); "
            "`dmlsearch resume FILE` continues from it"
        )
    if not versions:
        typer.echo("no model registered from it")
        return
    import pandas as pd

    _table(pd.DataFrame(versions), title=f"models trained by {exp.name}")
