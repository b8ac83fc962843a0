"""``python -m dmlsearch``: the same command line as ``dmlsearch``."""

from __future__ import annotations

from .cli import main

main()
