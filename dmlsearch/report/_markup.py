"""HTML pieces shared by a search's report and a training job's: tables, the page, the file."""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import errno
import hashlib
import html
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import _finite, _text

if TYPE_CHECKING:
    from ..registry._base import ExperimentRecord


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    e = html.escape
    head = "".join(f"<th>{e(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(_text(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    attr = f" class='{e(cls)}'" if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _when(ts: Any) -> str:
    if not _finite(ts):
        return "-"
    moment = _dt.datetime.fromtimestamp(float(ts), tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _bytes(n: Any) -> str:
    if not _finite(n):
        return _text(n)
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.3g} {unit}"
        size /= 1024
    return _text(n)  # pragma: no cover - the loop always returns


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _cluster_rows(exp: ExperimentRecord) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for key, value in sorted(exp.cluster.items()):
        shown = _bytes(value) if key.endswith("bytes") else value
        rows.append([f"cluster {key}", "-" if value is None else shown])
    return rows


def _config_sections(exp: ExperimentRecord) -> list[str]:
    """The folded configuration snapshot and the package versions."""
    e = html.escape
    return [
        "<h2>Configuration</h2>",
        f"<details><summary>the configuration snapshot ({_count(len(exp.config), 'key')})"
        "</summary>"
        f"<pre>{e(json.dumps(exp.config, indent=2, default=str))}</pre></details>",
        "<h2>Package versions</h2>",
        _table(["package", "version"], sorted(exp.package_versions.items()))
        if exp.package_versions
        else "<p>None recorded.</p>",
    ]


def _figure_section(title: str, png: bytes, caption: str) -> str:
    e = html.escape
    data_uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    parts = [f"<h2>{e(title)}</h2><figure><img alt='{e(title)}' src='{data_uri}'>"]
    if caption:
        parts.append(f"<figcaption>{e(caption)}</figcaption>")
    parts.append("</figure>")
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1150px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left;vertical-align:top}
th{background:#f2f2f2} table.summary td:first-child{font-weight:600;white-space:nowrap}
td{max-width:40em;overflow-wrap:anywhere}
figure{margin:0 0 1.5em} img{max-width:100%;border:1px solid #eee}
figcaption,.meta{color:#555;font-size:13px}
pre{background:#f7f7f7;padding:0.6em;overflow:auto;font-size:12px;max-height:40em}
"""


def _page(exp: ExperimentRecord, heading: str, body: Sequence[str]) -> str:
    """The whole document: title, ``heading`` with the experiment's name, then ``body``."""
    from .. import __version__

    e = html.escape
    generated = _when(_dt.datetime.now(tz=_dt.timezone.utc).timestamp())
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>dmlsearch report: {e(exp.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(heading)} {e(exp.name)}</h1>",
        f"<p class='meta'>Experiment id {exp.id}; report generated {e(generated)} by "
        f"dmlsearch {e(__version__)}.</p>",
        *body,
        "</body></html>\n",
    ]
    return "\n".join(parts)


#: The longest file name, in bytes, that Linux's and macOS's file systems take.
_NAME_MAX = 255


def _fit_name(name: str, suffix: str) -> str:
    """``name + suffix``, or where that is over :data:`_NAME_MAX` bytes, ``name`` cut short
    and a hash of all of it before ``suffix``: still readable, and distinct names stay
    distinct."""
    if len(os.fsencode(name + suffix)) <= _NAME_MAX:
        return name + suffix
    tail = "~" + hashlib.sha256(os.fsencode(name)).hexdigest()[:10] + suffix
    head = name[:_NAME_MAX]
    while len(os.fsencode(head + tail)) > _NAME_MAX:  # a character may take 4 bytes
        head = head[:-1]
    return head + tail


def _file_name(experiment: str) -> str:
    """The default report file of ``experiment``: its name (characters other than
    letters, digits, ``.``, ``-`` and ``_`` replaced) plus ``.html``, cut to fit."""
    return _fit_name(re.sub(r"[^\w.-]+", "_", experiment), ".html")


def _names_a_folder(given: str) -> bool:
    """Whether the path as given ends in a separator, ``.`` or ``..``: a folder, existing
    or not (``Path`` drops a trailing ``/``, so ``newdir/`` would become a file)."""
    last = given
    for sep in filter(None, (os.sep, os.altsep)):
        last = last.rsplit(sep, 1)[-1]
    return last in ("", ".", "..")


def _write(text: str, path: str | os.PathLike[str]) -> Path:
    out, given = Path(path), os.fspath(path)
    try:
        if _names_a_folder(given) or out.is_dir():
            raise IsADirectoryError(
                errno.EISDIR,
                f"is a folder: give the report a file name (e.g. {out / 'report.html'})",
            )
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _path_error(exc, out, given) from None
    # Written beside the target, then renamed: a reader never sees half a report. The
    # temporary name is longer than the target's: it is cut to fit where that one fits.
    tmp = out.with_name(_fit_name(f".{out.name}", f".{os.getpid()}.tmp"))
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # e.g. a read-only folder: there is no tmp file
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _path_error(exc, out, given) from None
        raise
    return out


def _file_parent(out: Path) -> Path | None:
    """The first of ``out``'s parents, from the root down, that is a file."""
    for parent in reversed(out.parents):
        with contextlib.suppress(OSError):
            if parent.exists() and not parent.is_dir():
                return parent
    return None


def _path_error(exc: OSError, out: Path, given: str) -> OSError:
    """``exc`` naming the report's path as ``given`` (not a temporary file or a parent),
    with what to change where the system's message does not say."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENAMETOOLONG:
        reason = (
            f"file name too long: give a path whose names are at most {_NAME_MAX} bytes "
            "each (UTF-8)"
        )
    elif exc.errno in (errno.EEXIST, errno.ENOTDIR) and (parent := _file_parent(out)):
        # mkdir says "File exists" of the parent alone, which reads as if the report did.
        return NotADirectoryError(
            errno.ENOTDIR,
            f"{parent} is a file, not a folder: write the report elsewhere or move that file",
            given,
        )
    return OSError(exc.errno, reason, given)
