"""The experiment commands: init, validate, run, resume, list, show, delete, report."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._app import app
from ._common import (
    ArtifactsOpt,
    ExperimentArg,
    FileArg,
    JsonOpt,
    RegistryOpt,
    SetOpt,
    YesOpt,
    _confirm,
    _deleted,
    _echo_json,
    _experiment,
    _fail,
    _handled,
    _open_registry,
    _os_error,
    _records,
    _table,
)
from ._run import _ensemble_line, _experiment_ensembles, _run

if TYPE_CHECKING:
    from ..registry import Registry


@app.command()
@_handled
def init(
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="Where to write the file (folders are created).")
    ] = Path("experiment.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a starter experiment file. It is commented, validates and runs as is."""
    from ..config import STARTER

    if path.is_dir():
        raise _fail(
            f"error: {path} is a folder; give a file name, e.g. {path / 'experiment.yaml'}", 2
        )
    if path.exists() and not force:
        raise _fail(f"error: {path} exists; pass --force to overwrite it", 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STARTER, encoding="utf-8")
    typer.echo(
        f"wrote {path}; next: dmlsearch validate {quote(str(path))} && dmlsearch run {quote(str(path))}"
    )


@app.command()
@_handled
def validate(file: FileArg, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Check an experiment file. Every problem with its field path and line (exit code 2)."""
    from ..config import ConfigError, load_config, summary

    try:
        cfg = load_config(file, set_ or ())
    except ConfigError as exc:
        if not json_:
            raise
        problems = [{"path": p.path, "line": p.line, "message": p.message} for p in exc.problems]
        _echo_json({"valid": False, "file": str(file), "errors": problems})
        raise typer.Exit(2) from None
    if json_:
        _echo_json({"valid": True, "file": str(file), **summary(cfg)})
        return
    outline = summary(cfg)
    if cfg.train is not None:
        t = outline["train"]
        typer.echo(
            f"{file}: valid. Experiment {cfg.name!r}: training job of {outline['model']} "
            f"({t['epochs']} epochs, {t['n_workers']} workers, sync {t['sync']}) on "
            f"{outline['data']}; cluster: {outline['cluster']['kind']}."
        )
        return
    typer.echo(
        f"{file}: valid. Experiment {cfg.name!r}: {outline['strategy']} search over "
        f"{', '.join(outline['parameters']) or 'no parameters'} of {outline['model']} on "
        f"{outline['data']}; cluster: {outline['cluster']['kind']}."
    )


ProgressOpt = Annotated[bool, typer.Option(help="Show the progress bar (on stderr).")]


@app.command()
@_handled
def run(
    file: FileArg,
    set_: SetOpt = None,
    registry: RegistryOpt = None,
    progress: ProgressOpt = True,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Delete an experiment of the same name first (its trials and artifacts); "
            "the flag is the confirmation.",
        ),
    ] = False,
    json_: JsonOpt = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --overwrite: delete the experiment even if it may still be running "
            "elsewhere (its driver was killed, its machine lost).",
        ),
    ] = False,
) -> None:
    """Run an experiment file. Every trial (or the training job) is recorded in the registry."""
    if force and not overwrite:
        raise _fail("error: --force is used only with --overwrite (or with resume)", 2)
    with _forced(force):
        _run(
            file, set_, registry, resume=False, progress=progress, json_=json_, overwrite=overwrite
        )


@app.command()
@_handled
def resume(
    file: FileArg,
    set_: SetOpt = None,
    registry: RegistryOpt = None,
    progress: ProgressOpt = True,
    json_: JsonOpt = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Resume even if the experiment may still be running elsewhere (its driver "
            "was killed, its machine lost): skips that check.",
        ),
    ] = False,
) -> None:
    """Continue the experiment of FILE. Recorded trials are not rerun; n_trials is the total."""
    with _forced(force):
        _run(file, set_, registry, resume=True, progress=progress, json_=json_)


@contextmanager
def _forced(force: bool) -> Iterator[None]:
    """With ``force``, the still-running check is skipped for this command only (it is
    read where the experiment is reopened or deleted, deep in the run)."""
    from .._experiment import FORCE_RESUME

    before = os.environ.get(FORCE_RESUME)
    if force:
        os.environ[FORCE_RESUME] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FORCE_RESUME, None)
        else:
            os.environ[FORCE_RESUME] = before


@app.command("list")
@_handled
def list_(registry: RegistryOpt = None, json_: JsonOpt = False) -> None:
    """List the experiments. Id, name, kind (search, optimize, train), status, created,
    trials, best value."""
    with _open_registry(registry) as reg:
        frame = reg.experiments()
    if json_:
        _echo_json(_records(frame))
    elif frame.empty:
        typer.echo(f"no experiments in {reg.shown_url}")
    else:
        _table(frame, title=f"experiments in {reg.shown_url}")


def _metric(exp: Any) -> str:
    """The name of the metric an experiment ranks its trials by (``value`` in the registry).

    Read from the recorded search: the scorer's name, the ``refit`` scorer of several, or
    ``score`` (the estimator's own ``score`` method or a callable scorer).
    """
    import ast

    def literal(key: str) -> Any:
        try:
            return ast.literal_eval(str(exp.config.get(key)))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None

    scoring = literal("scoring")
    if isinstance(scoring, str):
        return scoring
    if isinstance(scoring, (list, tuple, dict)) and scoring:
        refit = literal("refit")
        if isinstance(refit, str):
            return refit
        first = next(iter(scoring))
        return str(first)
    return "score"


def _state_counts(registry: Registry, experiment_id: int) -> dict[str, int]:
    """How many trials the experiment has in each state, most first (then by name);
    counted by the store in one query, not by reading every trial (seconds for thousands)."""
    counts = registry.store.count_trials_by_state(experiment_id)
    return dict(sorted(((s, n) for s, n in counts.items() if n), key=lambda c: (-c[1], c[0])))


@app.command()
@_handled
def show(
    experiment: ExperimentArg,
    k: Annotated[int, typer.Option("-k", "--top", min=1, help="How many trials.")] = 10,
    registry: RegistryOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show an experiment's leaderboard. Its best completed trials, best first.

    A training job: its settings and its registered model version (epochs, final loss)."""
    from ._train import is_training_job, show_training_job

    with _open_registry(registry) as reg:
        exp = _experiment(reg, experiment)
        if is_training_job(exp):
            show_training_job(reg, exp, json_)
            return
        board = reg.leaderboard(exp.id, k=k)
        counts = _state_counts(reg, exp.id)
        ensembles = _experiment_ensembles(reg, exp.name)
    metric = _metric(exp)
    if json_:
        _echo_json(
            {
                "experiment": exp.name,
                "id": exp.id,
                "status": exp.status,
                "metric": metric,
                "trials": {str(k_): int(v) for k_, v in counts.items()},
                "leaderboard": _records(board),
                "ensembles": ensembles,
            }
        )
        return
    states = ", ".join(f"{v} {s}" for s, v in sorted(counts.items())) or "no trials"
    typer.echo(f"{exp.name} (id {exp.id}, {exp.status}): {states}")
    if board.empty:
        typer.echo("no completed trials yet")
    else:
        # The value is the mean cross-validated score: name it as scikit-learn's cv_results_.
        board = board.rename(columns={"value": f"mean_test_{metric}"})
        by = f"resource, then mean {metric}" if "resource" in board else f"mean {metric}"
        _table(board, title=f"top {len(board)} of {exp.name} by {by}")
    for ens in ensembles:
        typer.echo(_ensemble_line(ens))


@app.command()
@_handled
def delete(
    experiment: ExperimentArg,
    yes: YesOpt = False,
    registry: RegistryOpt = None,
    artifacts: ArtifactsOpt = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Delete it even if it may still be running elsewhere (its driver was "
            "killed, its machine lost).",
        ),
    ] = False,
) -> None:
    """Delete an experiment. Its trials go too, and artifacts nothing else refers to."""
    from .._experiment import check_not_running

    with _open_registry(registry, artifacts) as reg:
        exp = _experiment(reg, experiment)
        with _forced(force):
            check_not_running(reg.store, exp, "delete")
        n_trials = reg.store.count_trials(exp.id)
        if not yes:
            _confirm(
                f"Delete experiment {exp.name!r} (id {exp.id}, {exp.status}, {n_trials} "
                f"trial(s)) from {reg.shown_url}?"
            )
        summary = reg.delete_experiment(exp.name, force=True)  # checked above
    typer.echo(f"deleted experiment {exp.name!r} ({_deleted(summary)})")


@app.command()
@_handled
def report(
    experiment: ExperimentArg,
    # A string, not a Path: Path drops the trailing "/" that says "newdir/" is a folder.
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="The HTML file. Default: <experiment>.html."),
    ] = None,
    registry: RegistryOpt = None,
    artifacts: ArtifactsOpt = None,
) -> None:
    """Write an HTML report of an experiment. One self-contained file, plots included."""
    with _open_registry(registry, artifacts) as reg:
        exp = _experiment(reg, experiment)
        from ..report import write_report
        from ..report._markup import _file_name

        path = _file_name(exp.name) if output is None else output
        try:
            written = write_report(reg, exp.name, path)
        except OSError as exc:
            if exc.filename != path:
                raise
            # Any reason the report's path cannot be written (a name too long, ...), not
            # only those every command maps: bad input, one line.
            raise _fail(f"error: {_os_error(exc)}", 2) from None
    typer.echo(f"wrote {written}")
