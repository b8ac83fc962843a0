"""The ``dmlsearch`` command line: a thin layer over :mod:`dmlsearch.config` and the registry.

Each command is a few lines over the public Python API; heavy imports (scikit-learn,
Dask, SQLAlchemy) happen inside the commands so that ``dmlsearch --help`` is instant.

Exit codes: 0 success; 1 the work failed (every trial failed, an artifact is corrupt);
2 bad input (an invalid file or override, a missing data file, an unreachable scheduler,
an unknown experiment or model); 130 interrupted. See docs/cli.md.

The package: :mod:`._app` (the Typer apps, ``--version``, :func:`main`), :mod:`._common`
(options, output, errors, opening the registry), :mod:`._experiment_cmds` and :mod:`._run`
(init, validate, run, resume, list, show, delete, report), :mod:`._registry_cmds`
(``dmlsearch registry ...`` and ``registry alias ...``), :mod:`._train` (a training job's
run and show).
"""

from __future__ import annotations

# Importing the command modules registers their commands on the apps.
from . import _experiment_cmds as _experiment_cmds
from . import _registry_cmds as _registry_cmds
from ._app import app, main

__all__ = ["app", "main"]
