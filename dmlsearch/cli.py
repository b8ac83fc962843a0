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

app = typer.Typer(
    name="dmlsearch",
    help="Distributed hyperparameter search on Dask, driven by experiment files.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
registry_app = typer.Typer(
    help="Registered models: list, versions, aliases, integrity, garbage collection.",
    no_args_is_help=True,
)
alias_app = typer.Typer(help="Aliases (name@alias) of model versions.", no_args_is_help=True)
registry_app.add_typer(alias_app, name="alias")
app.add_typer(registry_app, name="registry")

F = TypeVar("F", bound=Callable[..., Any])

# -- shared options ------------------------------------------------------------------------

FileArg = Annotated[Path, typer.Argument(help="An experiment file (YAML).", show_default=False)]
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


def _open_registry(url: str | None, artifacts: str | None = None) -> Registry:
    """The registry to read; a SQLite file that does not exist is not created."""
    import sqlalchemy as sa

    from .registry import Registry, default_registry_url

    url = url or default_registry_url()
    parsed = sa.make_url(url)
    if (
        parsed.get_backend_name() == "sqlite"
        and parsed.database not in (None, "", ":memory:")
        and not Path(str(parsed.database)).exists()
    ):
        raise _fail(
            f"error: no registry at {url} (run an experiment first, or pass --registry URL "
            "or set DMLSEARCH_REGISTRY)",
            2,
        )
    return Registry(url, artifacts)


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


@app.command()
@_handled
def init(
    path: Annotated[Path, typer.Argument(help="Where to write the file.")] = Path(
        "experiment.yaml"
    ),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter experiment file that validates and runs as is."""
    from .config import STARTER

    if path.exists() and not force:
        raise _fail(f"error: {path} exists; pass --force to overwrite it", 2)
    path.write_text(STARTER, encoding="utf-8")
    typer.echo(f"wrote {path}; next: dmlsearch validate {path} && dmlsearch run {path}")


@app.command()
@_handled
def validate(file: FileArg, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Check an experiment file: every problem with its field path and line (exit code 2)."""
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
) -> None:
    import time

    from .config import load_config, run_experiment

    cfg = load_config(file, overrides or ())
    start = time.perf_counter()
    search = run_experiment(cfg, resume=resume, progress=progress, registry_url=registry)
    result = _result(search, time.perf_counter() - start)
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


def _result(search: Any, elapsed: float) -> dict[str, Any]:
    """The run summary (``run --json``)."""
    trials = search.trials_
    best = getattr(search, "best_index_", None)
    version = getattr(search, "model_version_", None)
    metric = search.scoring if isinstance(search.scoring, str) else search.refit
    return {
        "experiment": getattr(search, "experiment_name_", search.experiment_name),
        "experiment_id": getattr(search, "experiment_id_", None),
        "n_trials": len(trials),
        "failed": sum(1 for t in trials if t.state != "complete"),
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
    json_: JsonOpt = False,
) -> None:
    """Run the search an experiment file describes, recording every trial in the registry."""
    _run(file, set_, registry, resume=False, progress=progress, json_=json_)


@app.command()
@_handled
def resume(
    file: FileArg,
    set_: SetOpt = None,
    registry: RegistryOpt = None,
    progress: ProgressOpt = True,
    json_: JsonOpt = False,
) -> None:
    """Continue the experiment of FILE: recorded trials are not rerun; n_trials is the total."""
    _run(file, set_, registry, resume=True, progress=progress, json_=json_)


@app.command("list")
@_handled
def list_(registry: RegistryOpt = None, json_: JsonOpt = False) -> None:
    """Experiments in the registry: id, name, status, created, trials, best value."""
    with _open_registry(registry) as reg:
        frame = reg.experiments()
    if json_:
        _echo_json(_records(frame))
    elif frame.empty:
        typer.echo(f"no experiments in {reg.url}")
    else:
        _table(frame, title=f"experiments in {reg.url}")


@app.command()
@_handled
def show(
    experiment: Annotated[str, typer.Argument(help="Experiment name (or id).")],
    k: Annotated[int, typer.Option("-k", "--top", min=1, help="How many trials.")] = 10,
    registry: RegistryOpt = None,
    json_: JsonOpt = False,
) -> None:
    """An experiment's leaderboard: its best completed trials, best first."""
    with _open_registry(registry) as reg:
        exp = _experiment(reg, experiment)
        board = reg.leaderboard(exp.id, k=k)
        counts = reg.trials(exp.id)["state"].value_counts().to_dict()
    if json_:
        _echo_json(
            {
                "experiment": exp.name,
                "id": exp.id,
                "status": exp.status,
                "trials": {str(k_): int(v) for k_, v in counts.items()},
                "leaderboard": _records(board),
            }
        )
        return
    states = ", ".join(f"{v} {s}" for s, v in sorted(counts.items())) or "no trials"
    typer.echo(f"{exp.name} (id {exp.id}, {exp.status}): {states}")
    if board.empty:
        typer.echo("no completed trials yet")
    else:
        _table(board, title=f"top {len(board)} of {exp.name}")


@app.command()
@_handled
def report(
    experiment: Annotated[str, typer.Argument(help="Experiment name (or id).")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The HTML file. Default: <experiment>.html."),
    ] = None,
    registry: RegistryOpt = None,
    artifacts: ArtifactsOpt = None,
) -> None:
    """Write a self-contained HTML report of an experiment (plots included)."""
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
    """Registered models: name, number of versions, latest version, aliases."""
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
    name: Annotated[str, typer.Argument(help="Model name.")],
    registry: RegistryOpt = None,
    json_: JsonOpt = False,
) -> None:
    """The versions of a model: created, format, metrics, aliases, lineage."""
    import dataclasses

    import pandas as pd

    with _open_registry(registry) as reg:
        records = reg.versions(name)
        if not records:
            _unknown_model(reg, name)
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
    _table(pd.DataFrame(rows), title=f"versions of {name}")


def _unknown_model(registry: Registry, name: str) -> None:
    import difflib

    close = difflib.get_close_matches(name, registry.models(), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else " (`dmlsearch registry models` lists them)"
    raise _fail(f"error: no model {name!r} in {registry.url}{hint}", 2)


@alias_app.command("set")
@_handled
def alias_set(
    name: Annotated[str, typer.Argument(help="Model name.")],
    alias: Annotated[str, typer.Argument(help="Alias, e.g. champion.")],
    version: Annotated[int, typer.Argument(help="Version number.")],
    registry: RegistryOpt = None,
) -> None:
    """Point NAME@ALIAS at VERSION (moving it if it pointed elsewhere)."""
    with _open_registry(registry) as reg:
        reg.set_alias(name, alias, version)
    typer.echo(f"{name}@{alias} -> version {version}")


@registry_app.command("verify")
@_handled
def registry_verify(
    registry: RegistryOpt = None, artifacts: ArtifactsOpt = None, json_: JsonOpt = False
) -> None:
    """Check every version's artifact exists and matches its sha256 (exit code 1 if not)."""
    with _open_registry(registry, artifacts) as reg:
        results = reg.verify()
    bad = [(n, v) for (n, v), ok in sorted(results.items()) if not ok]
    if json_:
        _echo_json([{"model": n, "version": v, "ok": ok} for (n, v), ok in sorted(results.items())])
    else:
        for n, v in bad:
            typer.echo(f"CORRUPT or MISSING: {n} v{v}", err=True)
        typer.echo(f"{len(results) - len(bad)} of {len(results)} versions verified")
    if bad:
        raise typer.Exit(1)


@registry_app.command("gc")
@_handled
def registry_gc(
    registry: RegistryOpt = None, artifacts: ArtifactsOpt = None, json_: JsonOpt = False
) -> None:
    """Delete artifact blobs no version refers to (left by crashes or deleted versions)."""
    with _open_registry(registry, artifacts) as reg:
        removed = reg.gc()
    if json_:
        _echo_json({"removed": removed})
    else:
        typer.echo(f"removed {len(removed)} unreferenced blob(s)")


def main() -> None:
    """Console-script entry point (``dmlsearch``)."""
    app(prog_name="dmlsearch")


if __name__ == "__main__":  # pragma: no cover
    main()
