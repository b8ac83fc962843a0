"""What ``dmlsearch run`` and ``dmlsearch resume`` do: run a file's search (or hand a
training job to :mod:`._train`) and print its summary, ensembles included."""

from __future__ import annotations

from pathlib import Path
from shlex import quote
from typing import Any

import typer

from .._errors import error_headline
from ..exceptions import AllTrialsFailedError, DmlsearchError
from ._common import (
    CURRENT_FILE,
    _console,
    _deleted,
    _echo_json,
    _fail,
    _probe_registry,
    _registry_url,
)


def _run(
    file: Path,
    overrides: list[str] | None,
    registry: str | None,
    *,
    resume: bool,
    progress: bool,
    json_: bool,
    overwrite: bool = False,
) -> None:
    import time

    CURRENT_FILE.set(file)  # for the messages of this command (reset by its _handled)
    from ..config import load_config, run_experiment

    cfg = load_config(file, overrides or ())
    if registry is not None:
        registry = _registry_url(registry)
    _probe_registry(registry or _registry_url(cfg.registry.url, "registry.url"))

    def replaced(summary: dict[str, Any]) -> None:
        typer.echo(f"deleted the previous experiment {cfg.name!r} ({_deleted(summary)})", err=True)

    if cfg.train is not None:
        from ._train import run_training_job

        run_training_job(
            cfg,
            registry,
            resume=resume,
            progress=progress,
            json_=json_,
            overwrite=overwrite,
            on_overwrite=replaced,
        )
        return

    if resume and _report_complete(cfg, registry, json_):
        return  # nothing to resume: no cluster, no refit, no new version
    ensembles: list[dict[str, Any]] = []

    def selected(selection: Any, record: Any) -> None:
        ensembles.append(_ensemble_row(record, selection.oof_score_))

    start, began = time.perf_counter(), time.time()
    try:
        search = run_experiment(
            cfg,
            resume=resume,
            progress=progress,
            registry_url=registry,
            overwrite=overwrite,
            on_overwrite=replaced,
            on_ensemble=selected,
        )
    except AllTrialsFailedError as exc:
        if json_:
            # Scripts get the summary on stdout whatever the outcome; the error line (and
            # exit code 1) follow on stderr as without --json.
            _echo_json(_failed_result(cfg, registry, exc, time.perf_counter() - start))
        raise
    result = _result(search, time.perf_counter() - start)
    result["ensembles"] = ensembles
    failure = _no_trial_completed(search, result)
    if json_:
        _echo_json(result)
    if failure is not None:
        # Not a success: no best score, whatever fit returned (exit code 1, docs/cli.md).
        raise _fail(failure, 1)
    if not json_:
        _print_summary(result, search, began)


def _print_summary(result: dict[str, Any], search: Any, began: float) -> None:
    """The end of a run, for a person: counts, best score and parameters, the version."""
    console = _console()
    stopped = f", {result['stopped']} stopped by the time budget" if result["stopped"] else ""
    console.print(
        f"[bold]{result['experiment']}[/bold]: {result['n_trials']} trials "
        f"({result['failed']} failed{stopped}) in {result['elapsed']:.1f}s"
    )
    if result["best_score"] is not None:
        console.print(
            f"best {result['metric']}: [bold]{result['best_score']:.4f}[/bold] "
            f"(trial {result['best_trial']})"
        )
        console.print(f"best params: {result['best_params']}")
    version = getattr(search, "model_version_", None)
    if version is not None and version.created < began:
        # A resume that found no better trial: its refit is that version (not registered again).
        console.print(
            f"model {version.model} v{version.version} (registered earlier from trial "
            f"{result['best_trial']}; not registered again); "
            f"`dmlsearch show {quote(str(result['experiment']))}` for the leaderboard"
        )
    elif result["model"] is not None:
        console.print(
            f"registered model {result['model']['name']} v{result['model']['version']}; "
            f"`dmlsearch show {quote(str(result['experiment']))}` for the leaderboard"
        )
    for ens in result["ensembles"]:
        console.print(_ensemble_line(ens))


def _report_complete(cfg: Any, registry: str | None, json_: bool) -> bool:
    """Whether resuming ``cfg``'s search would run nothing new (its experiment is complete
    and records every trial the file asks for, :func:`dmlsearch._experiment.
    already_complete`); then it says so, naming its best trial and model version."""
    from .._experiment import already_complete
    from ..config import build_search, make_registry

    with make_registry(cfg, registry) as reg:
        search = build_search(cfg, registry=reg, resume=True)
        done = already_complete(reg, search)
        ensembles = [] if done is None else _experiment_ensembles(reg, cfg.name)
    if done is None:
        return False
    if cfg.ensemble is not None and not ensembles:
        # The search ended but its ensemble was never registered (the run was stopped or
        # failed while selecting it): the resume restores every trial and selects it.
        return False
    best, version = done.best, done.version
    result = {
        "experiment": done.experiment.name,
        "experiment_id": done.experiment.id,
        "kind": "search",
        "complete": True,
        "n_trials": done.recorded,
        "metric": _metric(search.scoring, search.refit),
        "best_score": None if best is None else best.value,
        "best_trial": None if best is None else best.number,
        "best_params": None if best is None else best.params,
        "model": None if version is None else {"name": version.model, "version": version.version},
        "ensembles": ensembles,
    }
    if json_:
        _echo_json(result)
    if done.asked is None:
        asked = "its schedule ran to the end with this n_trials"
    elif done.recorded > done.asked:
        asked = f"more than the {done.asked} the file asks for (search.n_trials)"
    else:
        asked = f"all {done.asked} the file asks for"
    lines = [
        f"experiment {done.experiment.name!r} is already complete: {done.recorded} trials "
        f"recorded, {asked}; nothing to resume (a larger --set search.n_trials=... runs more)"
    ]
    if best is not None:
        lines.append(f"best {result['metric']}: {_score(best.value)} (trial {best.number})")
    if version is not None:
        trial = version.lineage.get("trial")
        lines.append(
            f"model {version.model} v{version.version}"
            + ("" if trial is None else f" (trial {trial})")
            + f"; `dmlsearch show {quote(done.experiment.name)}` for the leaderboard"
        )
    for ens in ensembles:
        lines.append(_ensemble_line(ens))
    for line in lines:
        typer.echo(line, err=True)
    return True


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _no_trial_completed(search: Any, result: dict[str, Any]) -> str | None:
    """The error line when no trial completed on every fold (each failed, or timed out),
    else None.

    The search may return such a fit (its folds scored ``error_score``, its best score
    NaN, a refit of an arbitrary trial): nothing in it ranks the candidates.
    """
    trials = search.trials_
    # A multi-fidelity search records each rung step: one complete step is a score.
    if not trials or any(t.state == "complete" for t in trials):
        return None
    first = next((t.error for t in trials if t.error), None)
    reason = error_headline(first) if first else "no error was recorded"
    registered = ""
    if result["model"] is not None:
        model = result["model"]
        registered = (
            f"; model {model['name']} v{model['version']} was registered from them anyway: "
            f"`dmlsearch registry delete-version {model['name']} {model['version']}` removes it"
        )
    return (
        f"error: no trial completed: {result['failed']} of {result['n_trials']} trials "
        f"failed, so there is no best score{registered}. The first error: {reason}"
    )


def _failed_result(
    cfg: Any, registry: str | None, exc: AllTrialsFailedError, elapsed: float
) -> dict[str, Any]:
    """``run --json``'s summary of a search that raised because no trial completed: the
    trials as the registry recorded them, no best, no model, and ``error``."""
    from ..config import make_registry

    name, exp_id, last = cfg.name, None, []
    try:
        with make_registry(cfg, registry) as reg:
            exp = reg.experiment(cfg.name)
            frame = reg.trials(exp.id)
        name, exp_id = exp.name, exp.id
        # A multi-fidelity search records a trial once per rung: its last step says its state.
        last = list(frame.groupby("number")["state"].last()) if len(frame) else []
    except DmlsearchError:
        pass  # no experiment recorded (the search failed before its first trial)
    return {
        "experiment": name,
        "experiment_id": exp_id,
        "n_trials": len(last),
        "failed": sum(1 for state in last if state in ("failed", "timeout")),
        "stopped": sum(1 for state in last if state == "stopped"),
        "elapsed": elapsed,
        "metric": _metric(cfg.search.scoring, cfg.search.refit),
        "best_score": None,
        "best_trial": None,
        "best_params": None,
        "model": None,
        "ensembles": [],
        "error": _one_line(str(exc)),
    }


def _metric(scoring: Any, refit: Any) -> str:
    metric = scoring if isinstance(scoring, str) else refit
    return metric if isinstance(metric, str) else "score"


def _one_line(message: str) -> str:
    """A message whose first line introduces a traceback, as one line: that line, then the
    traceback's exception."""
    head, _, rest = message.partition("\n")
    return f"{head} {error_headline(rest)}".strip() if rest else head


def _ensemble_row(record: Any, oof_score: float | None = None) -> dict[str, Any]:
    """An ensemble version as ``run --json`` and ``show --json`` give it."""
    score = record.metrics.get("oof_score") if oof_score is None else oof_score
    return {
        "name": record.model,
        "version": record.version,
        "members": list(record.lineage.get("members", [])),
        "weights": list(record.lineage.get("weights", [])),
        "trials": list(record.lineage.get("trials", [])),
        "oof_score": score,
    }


def _ensemble_line(ens: dict[str, Any]) -> str:
    trials = ", ".join(f"{t}:{w:.2f}" for t, w in zip(ens["trials"], ens["weights"], strict=False))
    score = "" if ens["oof_score"] is None else f", out-of-fold score {ens['oof_score']:.4f}"
    return (
        f"ensemble {ens['name']} v{ens['version']}: {len(ens['members'])} members"
        f"{score} (trial:weight {trials})"
    )


def _experiment_ensembles(reg: Any, experiment: str) -> list[dict[str, Any]]:
    """The ensemble versions registered from ``experiment``, oldest first."""
    from ..registry.registry import ENSEMBLE_FORMAT

    return [
        _ensemble_row(v)
        for name in reg.models()
        for v in reg.versions(name)
        if v.format == ENSEMBLE_FORMAT and v.lineage.get("experiment") == experiment
    ]


def _result(search: Any, elapsed: float) -> dict[str, Any]:
    """The run summary (``run --json``)."""
    trials = search.trials_
    best = getattr(search, "best_index_", None)
    version = getattr(search, "model_version_", None)
    # A multi-fidelity search records a trial once per rung: count each trial once, by its
    # last step.
    last = {t.number: t for t in trials}
    return {
        "experiment": getattr(search, "experiment_name_", search.experiment_name),
        "experiment_id": getattr(search, "experiment_id_", None),
        "n_trials": len(last),
        "failed": sum(1 for t in last.values() if t.state in ("failed", "timeout")),
        # Still running when the time budget ran out: expected, not failures.
        "stopped": sum(1 for t in last.values() if t.state == "stopped"),
        "elapsed": elapsed,
        "metric": _metric(search.scoring, search.refit),
        "best_score": getattr(search, "best_score_", None),
        "best_trial": trials[best].number if best is not None else None,
        "best_params": getattr(search, "best_params_", None),
        "model": None if version is None else {"name": version.model, "version": version.version},
    }
