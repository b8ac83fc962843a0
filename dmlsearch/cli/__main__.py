"""``python -m dmlsearch.cli``: the same as the ``dmlsearch`` command."""

from __future__ import annotations

from ._app import main

if __name__ == "__main__":  # pragma: no cover
    main()
