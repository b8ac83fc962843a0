"""One line that names a recorded error, for the page, the report and summaries.

Trials record the whole traceback (``traceback.format_exc()``); a table has room for one
line. The last line of a traceback is the last line of the exception's message, which for
multi-line messages (scikit-learn's NaN checks, pydantic, pandas) is a detail that says
nothing on its own and groups unrelated errors together. The headline is the line Python
starts the exception with: ``Type: first line of the message``.
"""

from __future__ import annotations

import re

__all__ = ["error_headline"]

_FRAME = re.compile(r'^  File ".*", line \d+')


def error_headline(error: object) -> str:
    """``Type: message`` of a traceback's last exception; a plain text's first line."""
    lines = [line.rstrip() for line in str(error or "").splitlines()]
    frames = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    if lines and lines[0].startswith("Traceback"):
        # After the last frame come its source and caret lines (indented), then the
        # exception: the first line at column 0.
        for line in lines[frames[-1] + 1 if frames else 1 :]:
            if line and not line[0].isspace():
                return line.strip()
    return next((line.strip() for line in lines if line.strip()), "")
