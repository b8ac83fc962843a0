"""``dmlsearch registry ...``: registered models, their versions and aliases, integrity
(verify) and clean-up (gc)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._app import alias_app, registry_app, tag_app
from ._common import (
    ArtifactsOpt,
    JsonOpt,
    ModelArg,
    RegistryOpt,
    YesOpt,
    _confirm,
    _echo_json,
    _fail,
    _handled,
    _open_registry,
    _table,
)

if TYPE_CHECKING:
    from ..registry import Registry


@registry_app.command("models")
@_handled
def registry_models(registry: RegistryOpt = None, json_: JsonOpt = False) -> None:
    """List the registered models. Number of versions, latest version, aliases."""
    import pandas as pd

    with _open_registry(registry) as reg:
        rows: list[dict[str, Any]] = []
        for name in reg.models():
            versions = reg.versions(name)
            rows.append(
                {
                    "model": name,
                    "versions": len(versions),
                    "latest": max((v.version for v in versions), default=None),
                    # Scripts get {alias: version}; the table shows it as text.
                    "aliases": dict(sorted((a, v.version) for v in versions for a in v.aliases)),
                }
            )
    if json_:
        _echo_json(rows)
    elif not rows:
        typer.echo(f"no models in {reg.shown_url}")
    else:
        for row in rows:
            row["aliases"] = ", ".join(f"{a}->v{v}" for a, v in row["aliases"].items())
        frame = pd.DataFrame(rows, columns=["model", "versions", "latest", "aliases"])
        _table(frame, title=f"models in {reg.shown_url}")


@registry_app.command("versions")
@_handled
def registry_versions(
    name: ModelArg,
    registry: RegistryOpt = None,
    json_: JsonOpt = False,
) -> None:
    """List the versions of a model. Created, format, metrics, aliases, tags, lineage."""
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
            "tags": ", ".join(f"{k}={v}" for k, v in sorted(r.tags.items())),
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
    raise _fail(f"error: no model {name!r} in {registry.shown_url}{hint}", 2)


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
            _confirm(f"Delete {name} version {version}{aliases} from {reg.shown_url}?")
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


VersionArg = Annotated[int, typer.Argument(metavar="VERSION", help="Version number.")]
KeyArg = Annotated[str, typer.Argument(metavar="KEY", help="Tag name, e.g. stage.")]


@tag_app.command("set")
@_handled
def tag_set(
    name: ModelArg,
    version: VersionArg,
    key: KeyArg,
    value: Annotated[str, typer.Argument(metavar="VALUE", help="Tag value.")],
    registry: RegistryOpt = None,
) -> None:
    """Set tag KEY of NAME's VERSION to VALUE (replacing its value)."""
    with _open_registry(registry) as reg:
        _known_model(reg, name)
        reg.set_tag(name, version, key, value)
    typer.echo(f"{name} version {version}: {key}={value}")


@tag_app.command("delete")
@_handled
def tag_delete(
    name: ModelArg, version: VersionArg, key: KeyArg, registry: RegistryOpt = None
) -> None:
    """Remove tag KEY of NAME's VERSION."""
    with _open_registry(registry) as reg:
        _known_model(reg, name)
        reg.delete_tag(name, version, key)
    typer.echo(f"removed tag {key} of {name} version {version}")


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
            help="Keep files younger than this: a registration may be writing them. With 0, "
            "a model version committing meanwhile still keeps its file (unless its process is "
            "killed right after committing), but the checkpoints of a running training job "
            "and the state copies of a running search do not: use 0 only when none runs.",
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
