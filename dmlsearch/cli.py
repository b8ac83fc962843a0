"""The ``dmlsearch`` command line: a thin layer over :mod:`dmlsearch.config` and the registry.

Each command is a few lines over the public Python API; heavy imports (scikit-learn,
Dask, SQLAlchemy) happen inside the commands so that ``dmlsearch --help`` is instant.

Exit codes: 0 success; 1 the work failed (every trial failed, an artifact is corrupt);
2 bad input (an invalid file or override, a missing data file, an unreachable scheduler,
an unknown experiment or model); 130 interrupted. See docs/cli.md.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from .registry import Registry

__all__ = ["app", "main"]

# Plain (click) help rather than rich panels: rich reads ``[a, b]`` in a help text as markup
# and drops it, and typer's panels show a ``<bool>`` type beside every flag.
_HELP: dict[str, Any] = {
    "no_args_is_help": True,
    "rich_markup_mode": None,
    "context_settings": {"help_option_names": ["-h", "--help"], "max_content_width": 100},
}
app = typer.Typer(
    name="dmlsearch",
    help="Distributed hyperparameter search on Dask, driven by experiment files.",
    add_completion=False,
    pretty_exceptions_enable=False,
    **_HELP,
)
registry_app = typer.Typer(
    help="Registered models. List, versions, aliases, deletion, integrity, clean-up.",
    **_HELP,
)
alias_app = typer.Typer(help="Set or remove aliases (name@alias) of versions.", **_HELP)
registry_app.add_typer(alias_app, name="alias")
app.add_typer(registry_app, name="registry")

F = TypeVar("F", bound=Callable[..., Any])

# -- shared options ------------------------------------------------------------------------

FileArg = Annotated[
    Path, typer.Argument(metavar="FILE", help="An experiment file (YAML).", show_default=False)
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="KEY.PATH=VALUE",
        help="Override a value of the file, e.g. --set search.n_trials=50 (repeatable; the "
        "value is read as YAML: 1e-3, true, [a, b]).",
    ),
]
RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        metavar="URL",
        help="Registry database URL. Default: $DMLSEARCH_REGISTRY, else ./dmlsearch.db.",
    ),
]
ArtifactsOpt = Annotated[
    str | None,
    typer.Option(
        "--artifacts",
        metavar="URL",
        help="Artifact store (folder or fsspec URL). Default: beside a SQLite registry, "
        "or $DMLSEARCH_ARTIFACTS.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (for scripts).")]
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (for scripts).")
]
ExperimentArg = Annotated[
    str, typer.Argument(metavar="EXPERIMENT", help="Experiment name (or id).", show_default=False)
]
ModelArg = Annotated[str, typer.Argument(metavar="NAME", help="Model name.", show_default=False)]


# -- output and errors ---------------------------------------------------------------------


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output is read by people too: do not squeeze tables into 80 columns.
    width = None if stream.isatty() else 200
    return Console(stderr=stderr, highlight=False, width=width)


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


@contextmanager
def _errors() -> Iterator[None]:
    """Our errors become one message on stderr and an exit code, never a traceback."""
    from .config import ConfigError
    from .exceptions import DmlsearchError, InvalidParameterError
    from .registry import NotFoundError

    try:
        yield
    except ConfigError as exc:
        raise _fail(f"error: {exc}", 2) from None
    except (InvalidParameterError, NotFoundError) as exc:
        raise _fail(f"error: {exc}", 2) from None
    except DmlsearchError as exc:
        raise _fail(f"error: {exc}", 1) from None
    except KeyboardInterrupt:
        raise _fail(
            "interrupted; `dmlsearch resume FILE` continues from the recorded trials", 130
        ) from None
    except (
        FileNotFoundError,
        FileExistsError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
    ) as exc:
        # A path given on the command line (or in a file) that cannot be read or written.
        raise _fail(f"error: {_os_error(exc)}", 2) from None
    except Exception as exc:
        # A database the registry cannot reach or use (sqlalchemy is imported by then).
        sa_exc = sys.modules.get("sqlalchemy.exc")
        if sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError):
            raise _fail(f"error: registry database: {_first_line(exc)}", 2) from None
        raise


def _os_error(exc: OSError) -> str:
    """``path: No such file or directory`` rather than ``[Errno 2] ...``."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason


def _handled(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _errors():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _jsonable(obj: Any) -> Any:
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)


def _echo_json(obj: Any) -> None:
    typer.echo(json.dumps(_clean(obj), indent=2, default=_jsonable))


def _clean(obj: Any) -> Any:
    # json.dumps writes NaN, which is not JSON; scripts get null instead.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _records(frame: Any) -> list[dict[str, Any]]:
    return list(json.loads(frame.to_json(orient="records", date_format="iso")))


def _table(frame: Any, title: str | None = None) -> None:
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in frame.columns:
        table.add_column(str(column), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    _console().print(table)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if hasattr(value, "strftime"):
        return str(value.strftime("%Y-%m-%d %H:%M:%S"))
    return str(value)


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message (drivers add their own context below it)."""
    orig = getattr(exc, "orig", None)  # sqlalchemy wraps the driver's error
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def _registry_url(url: str | None, where: str = "--registry") -> str:
    """``url``, else the default; refuses (exit 2) a string that is not a database URL."""
    import os

    import sqlalchemy as sa

    from .registry import default_registry_url

    if url is None:
        url = default_registry_url()
        where = "$DMLSEARCH_REGISTRY" if os.environ.get("DMLSEARCH_REGISTRY") else "the default"
    try:
        sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        hint = (
            f"sqlite:///{url}"
            if url.endswith((".db", ".sqlite", ".sqlite3"))
            else ("sqlite:///dmlsearch.db")
        )
        raise _fail(
            f"error: {where} {url!r} is not a database URL; write e.g. {hint} or "
            "postgresql+psycopg://user@host/db",
            2,
        ) from None
    return url


def _open_registry(url: str | None, artifacts: str | None = None) -> Registry:
    """The registry at ``url``; commands other than run/resume never create one (exit 2)."""
    import sqlalchemy as sa

    from .registry import NotFoundError, Registry, RegistryError

    url = _registry_url(url)
    parsed = sa.make_url(url)
    if (
        parsed.get_backend_name() == "sqlite"
        and parsed.database not in (None, "", ":memory:")
        and not Path(str(parsed.database)).expanduser().exists()
    ):
        raise _fail(
            f"error: no registry at {url} (run an experiment first, or pass --registry URL "
            "or set DMLSEARCH_REGISTRY)",
            2,
        )
    try:
        return Registry(url, artifacts, create=False)
    except NotFoundError:
        raise
    except (RegistryError, sa.exc.SQLAlchemyError) as exc:
        # No database, no registry tables in it, a server that cannot be reached.
        raise _fail(_open_message(url, exc), 2) from None


def _open_message(url: str, exc: BaseException) -> str:
    """One line on why the registry at ``url`` cannot be opened."""
    text = _first_line(exc)
    if _safe(url) in text or url in text:
        return f"error: {text}"  # the registry's own message names the database
    return f"error: cannot open the registry at {_safe(url)}: {text}"


def _probe_registry(url: str) -> None:
    """Exit 2 before any work when a database server cannot be reached (or has no database).

    A run creates a SQLite file and a missing schema, so only the connection is tried.
    """
    import sqlalchemy as sa

    from .registry import RegistryError
    from .registry.sql import SQLStore

    if sa.make_url(url).get_backend_name() == "sqlite":
        return
    store: SQLStore | None = None
    try:
        store = SQLStore(url, migrate=False)
        store.schema_version()
    except (RegistryError, sa.exc.SQLAlchemyError) as exc:
        raise _fail(_open_message(url, exc), 2) from None
    finally:
        if store is not None:
            store.close()


def _safe(url: str) -> str:
    """``url`` with any password hidden."""
    import sqlalchemy as sa

    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return url


def _experiment(registry: Registry, name: str) -> Any:
    """The experiment called ``name`` (or with that id); an unknown name suggests one."""
    import difflib

    from .registry import NotFoundError

    try:
        return registry.experiment(name)
    except NotFoundError:
        if name.isdigit():
            try:
                return registry.experiment(int(name))
            except NotFoundError:
                pass
        names = list(registry.experiments()["name"])
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = "" if close else " (`dmlsearch list` shows them)"
        raise _fail(f"error: no experiment {name!r} in {registry.url}{hint}{listing}", 2) from None


# -- commands ------------------------------------------------------------------------------


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("dmlsearch")
        except PackageNotFoundError:  # pragma: no cover - a source tree not installed
            from . import __version__ as number
        typer.echo(f"dmlsearch {number}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Distributed hyperparameter search on Dask, driven by experiment files."""


@app.command()
@_handled
def init(
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="Where to write the file (folders are created).")
    ] = Path("experiment.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a starter experiment file. It is commented, validates and runs as is."""
    from .config import STARTER

    if path.is_dir():
        raise _fail(
            f"error: {path} is a folder; give a file name, e.g. {path / 'experiment.yaml'}", 2
        )
    if path.exists() and not force:
        raise _fail(f"error: {path} exists; pass --force to overwrite it", 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STARTER, encoding="utf-8")
    typer.echo(f"wrote {path}; next: dmlsearch validate {path} && dmlsearch run {path}")


@app.command()
@_handled
def validate(file: FileArg, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Check an experiment file. Every problem with its field path and line (exit code 2)."""
    from .config import ConfigError, load_config, summary

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

    from .config import load_config, run_experiment

    cfg = load_config(file, overrides or ())
    if registry is not None:
        registry = _registry_url(registry)
    _probe_registry(registry or _registry_url(cfg.registry.url, "registry.url"))

    def replaced(summary: dict[str, Any]) -> None:
        typer.echo(f"deleted the previous experiment {cfg.name!r} ({_deleted(summary)})", err=True)

    if cfg.train is not None:
        from ._cli_train import run_training_job

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

    ensembles: list[dict[str, Any]] = []

    def selected(selection: Any, record: Any) -> None:
        ensembles.append(_ensemble_row(record, selection.oof_score_))

    start = time.perf_counter()
    search = run_experiment(
        cfg,
        resume=resume,
        progress=progress,
        registry_url=registry,
        overwrite=overwrite,
        on_overwrite=replaced,
        on_ensemble=selected,
    )
    result = _result(search, time.perf_counter() - start)
    result["ensembles"] = ensembles
    if json_:
        _echo_json(result)
        return
    console = _console()
    console.print(
        f"[bold]{result['experiment']}[/bold]: {result['n_trials']} trials "
        f"({result['failed']} failed) in {result['elapsed']:.1f}s"
    )
    if result["best_score"] is not None:
        console.print(
            f"best {result['metric']}: [bold]{result['best_score']:.4f}[/bold] "
            f"(trial {result['best_trial']})"
        )
        console.print(f"best params: {result['best_params']}")
    if result["model"] is not None:
        console.print(
            f"registered model {result['model']['name']} v{result['model']['version']}; "
            f"`dmlsearch show {result['experiment']}` for the leaderboard"
        )
    for ens in ensembles:
        console.print(_ensemble_line(ens))


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
    from .registry.registry import ENSEMBLE_FORMAT

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
    metric = search.scoring if isinstance(search.scoring, str) else search.refit
    # A multi-fidelity search records a trial once per rung: count each trial once, by its
    # last step.
    last = {t.number: t for t in trials}
    return {
        "experiment": getattr(search, "experiment_name_", search.experiment_name),
        "experiment_id": getattr(search, "experiment_id_", None),
        "n_trials": len(last),
        "failed": sum(1 for t in last.values() if t.state != "complete"),
        "elapsed": elapsed,
        "metric": metric if isinstance(metric, str) else "score",
        "best_score": getattr(search, "best_score_", None),
        "best_trial": trials[best].number if best is not None else None,
        "best_params": getattr(search, "best_params_", None),
        "model": None if version is None else {"name": version.model, "version": version.version},
    }


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
) -> None:
    """Run an experiment file. Every trial (or the training job) is recorded in the registry."""
    _run(file, set_, registry, resume=False, progress=progress, json_=json_, overwrite=overwrite)


@app.command()
@_handled
def resume(
    file: FileArg,
    set_: SetOpt = None,
    registry: RegistryOpt = None,
    progress: ProgressOpt = True,
    json_: JsonOpt = False,
) -> None:
    """Continue the experiment of FILE. Recorded trials are not rerun; n_trials is the total."""
    _run(file, set_, registry, resume=True, progress=progress, json_=json_)


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
        typer.echo(f"no experiments in {reg.url}")
    else:
        _table(frame, title=f"experiments in {reg.url}")


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
    from ._cli_train import is_training_job, show_training_job

    with _open_registry(registry) as reg:
        exp = _experiment(reg, experiment)
        if is_training_job(exp):
            show_training_job(reg, exp, json_)
            return
        board = reg.leaderboard(exp.id, k=k)
        counts = reg.trials(exp.id)["state"].value_counts().to_dict()
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
        _table(board, title=f"top {len(board)} of {exp.name} by mean {metric}")
    for ens in ensembles:
        typer.echo(_ensemble_line(ens))


@app.command()
@_handled
def delete(
    experiment: ExperimentArg,
    yes: YesOpt = False,
    registry: RegistryOpt = None,
    artifacts: ArtifactsOpt = None,
) -> None:
    """Delete an experiment. Its trials go too, and artifacts nothing else refers to."""
    with _open_registry(registry, artifacts) as reg:
        exp = _experiment(reg, experiment)
        n_trials = reg.store.count_trials(exp.id)
        if not yes:
            _confirm(
                f"Delete experiment {exp.name!r} (id {exp.id}, {exp.status}, {n_trials} "
                f"trial(s)) from {reg.url}?"
            )
        summary = reg.delete_experiment(exp.name)
    typer.echo(f"deleted experiment {exp.name!r} ({_deleted(summary)})")


def _confirm(question: str) -> None:
    """Ask; anything but yes (or no terminal to ask on) stops with exit code 1."""
    try:
        ok = typer.confirm(question, default=False)
    except typer.Abort:
        ok = False
    if not ok:
        raise _fail("nothing deleted (pass --yes to delete without a question)", 1)


def _deleted(summary: dict[str, Any]) -> str:
    """``12 trials, 1 artifact`` from a deletion summary."""
    parts = []
    for key in ("trials", "artifacts", "versions"):
        value = summary.get(key)
        if isinstance(value, (list, tuple, set, dict)):
            value = len(value)
        if isinstance(value, int):
            parts.append(f"{value} {key[:-1] if value == 1 else key}")
    return ", ".join(parts) or "nothing else"


@app.command()
@_handled
def report(
    experiment: ExperimentArg,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The HTML file. Default: <experiment>.html."),
    ] = None,
    registry: RegistryOpt = None,
    artifacts: ArtifactsOpt = None,
) -> None:
    """Write an HTML report of an experiment. One self-contained file, plots included."""
    import re

    with _open_registry(registry, artifacts) as reg:
        exp = _experiment(reg, experiment)
        from .report import write_report

        path = output or Path(re.sub(r"[^\w.-]+", "_", exp.name) + ".html")
        written = write_report(reg, exp.name, path)
    typer.echo(f"wrote {written}")


# -- registry ------------------------------------------------------------------------------


@registry_app.command("models")
@_handled
def registry_models(registry: RegistryOpt = None, json_: JsonOpt = False) -> None:
    """List the registered models. Number of versions, latest version, aliases."""
    import pandas as pd

    with _open_registry(registry) as reg:
        rows = []
        for name in reg.models():
            versions = reg.versions(name)
            aliases = sorted(f"{a}->v{v.version}" for v in versions for a in v.aliases)
            rows.append(
                {
                    "model": name,
                    "versions": len(versions),
                    "latest": max((v.version for v in versions), default=None),
                    "aliases": ", ".join(aliases),
                }
            )
    frame = pd.DataFrame(rows, columns=["model", "versions", "latest", "aliases"])
    if json_:
        _echo_json(_records(frame))
    elif frame.empty:
        typer.echo(f"no models in {reg.url}")
    else:
        _table(frame, title=f"models in {reg.url}")


@registry_app.command("versions")
@_handled
def registry_versions(
    name: ModelArg,
    registry: RegistryOpt = None,
    json_: JsonOpt = False,
) -> None:
    """List the versions of a model. Created, format, metrics, aliases, lineage."""
    import dataclasses

    import pandas as pd

    with _open_registry(registry) as reg:
        _known_model(reg, name)
        records = reg.versions(name)
    if json_:
        _echo_json([dataclasses.asdict(r) for r in records])
        return
    rows = [
        {
            "version": r.version,
            "created": pd.Timestamp(r.created, unit="s", tz="UTC"),
            "format": r.format,
            "metrics": ", ".join(
                f"{k}={v:.4g}" for k, v in r.metrics.items() if isinstance(v, float)
            ),
            "aliases": ", ".join(r.aliases),
            "experiment": r.lineage.get("experiment"),
            "trial": r.lineage.get("trial"),
            "sha256": r.sha256[:12],
        }
        for r in records
    ]
    if not rows:
        typer.echo(f"model {name} has no versions left")
        return
    _table(pd.DataFrame(rows), title=f"versions of {name}")


def _known_model(registry: Registry, name: str) -> None:
    """Exit 2 with a "did you mean" unless ``name`` is a registered model."""
    import difflib

    names = registry.models()
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else " (`dmlsearch registry models` lists them)"
    raise _fail(f"error: no model {name!r} in {registry.url}{hint}", 2)


@registry_app.command("delete-version")
@_handled
def registry_delete_version(
    name: ModelArg,
    version: Annotated[int, typer.Argument(metavar="VERSION", help="Version number.")],
    yes: YesOpt = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Delete it even if a registered ensemble has it as a member."),
    ] = False,
    registry: RegistryOpt = None,
) -> None:
    """Delete one version of a model. Its aliases go too; `registry gc` frees its file.

    A member of a registered ensemble is refused unless --force (the ensemble would no
    longer load)."""
    with _open_registry(registry) as reg:
        _known_model(reg, name)
        record = reg.model_version(name, version=version)
        users = [] if force else reg.ensembles_using(name, version)
        if users:
            raise _fail(
                f"error: {name} version {version} is a member of the ensemble version(s) "
                f"{', '.join(users)}; delete those first, or pass --force",
                2,
            )
        if not yes:
            aliases = f", aliases {', '.join(record.aliases)}" if record.aliases else ""
            _confirm(f"Delete {name} version {version}{aliases} from {reg.url}?")
        reg.delete_version(name, version, force=force)
    typer.echo(f"deleted {name} version {version}")


@alias_app.command("set")
@_handled
def alias_set(
    name: ModelArg,
    alias: Annotated[str, typer.Argument(metavar="ALIAS", help="Alias, e.g. champion.")],
    version: Annotated[int, typer.Argument(metavar="VERSION", help="Version number.")],
    registry: RegistryOpt = None,
) -> None:
    """Point NAME@ALIAS at VERSION. An alias that pointed elsewhere moves."""
    with _open_registry(registry) as reg:
        _known_model(reg, name)
        reg.set_alias(name, alias, version)
    typer.echo(f"{name}@{alias} -> version {version}")


@alias_app.command("delete")
@_handled
def alias_delete(
    name: ModelArg,
    alias: Annotated[str, typer.Argument(metavar="ALIAS", help="The alias to remove.")],
    registry: RegistryOpt = None,
) -> None:
    """Remove NAME@ALIAS. The version it pointed at is kept."""
    with _open_registry(registry) as reg:
        _known_model(reg, name)
        reg.delete_alias(name, alias)
    typer.echo(f"removed {name}@{alias}")


@registry_app.command("verify")
@_handled
def registry_verify(
    registry: RegistryOpt = None, artifacts: ArtifactsOpt = None, json_: JsonOpt = False
) -> None:
    """Verify the artifacts. Each must exist and match its sha256 (exit code 1 if not).

    The models' versions, and the last checkpoint of each unfinished training job (what
    `dmlsearch resume` would continue from)."""
    with _open_registry(registry, artifacts) as reg:
        results = reg.verify()
        problems = reg.verify_errors() if not all(results.values()) else {}
        checkpoints = reg.checkpoint_errors()
    bad = [(n, v) for (n, v), ok in sorted(results.items()) if not ok]
    if json_:
        _echo_json(
            [
                {"model": n, "version": v, "ok": ok, "error": problems.get((n, v))}
                for (n, v), ok in sorted(results.items())
            ]
            + [
                {"experiment": name, "checkpoint": True, "ok": False, "error": error}
                for name, error in sorted(checkpoints.items())
            ]
        )
    else:
        for n, v in bad:
            detail = problems.get((n, v))
            typer.echo(
                f"CORRUPT or MISSING: {n} v{v}" + (f": {detail}" if detail else ""), err=True
            )
        for name, error in sorted(checkpoints.items()):
            typer.echo(f"CORRUPT or MISSING: checkpoint of job {name}: {error}", err=True)
        typer.echo(f"{len(results) - len(bad)} of {len(results)} versions verified")
    if bad or checkpoints:
        raise typer.Exit(1)


@registry_app.command("gc")
@_handled
def registry_gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")
    ] = False,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            metavar="SECONDS",
            min=0,
            help="Keep files younger than this: a registration may be writing them.",
        ),
    ] = 3600.0,
    registry: RegistryOpt = None,
    artifacts: ArtifactsOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Delete unreferenced artifacts. Files of this registry no version refers to."""
    with _open_registry(registry, artifacts) as reg:
        removed = reg.gc(dry_run=dry_run, grace_seconds=grace)
    if json_:
        _echo_json({"dry_run": dry_run, "removed": removed})
        return
    if dry_run:
        for digest in removed:
            typer.echo(digest)
        typer.echo(f"would remove {len(removed)} unreferenced blob(s); nothing deleted", err=True)
    else:
        typer.echo(f"removed {len(removed)} unreferenced blob(s)")


def main() -> None:
    """Console-script entry point (``dmlsearch``)."""
    app(prog_name="dmlsearch")


if __name__ == "__main__":  # pragma: no cover
    main()
