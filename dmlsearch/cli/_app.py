"""The Typer apps of the command line (``dmlsearch``, ``registry``, ``registry alias``),
the top-level ``--version`` option and the console-script entry point."""

from __future__ import annotations

from typing import Annotated, Any

import typer

__all__ = ["alias_app", "app", "main", "registry_app", "tag_app"]

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
    help="Registered models. List, versions, aliases, tags, deletion, integrity, clean-up.",
    **_HELP,
)
alias_app = typer.Typer(help="Set or remove aliases (name@alias) of versions.", **_HELP)
registry_app.add_typer(alias_app, name="alias")
tag_app = typer.Typer(help="Set or remove tags (key=value) of versions.", **_HELP)
registry_app.add_typer(tag_app, name="tag")
app.add_typer(registry_app, name="registry")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("dmlsearch")
        except PackageNotFoundError:  # pragma: no cover - a source tree not installed
            from .. import __version__ as number
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


def main() -> None:
    """Console-script entry point (``dmlsearch``)."""
    app(prog_name="dmlsearch")
