"""The report as one self-contained HTML file."""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..registry._base import COMPLETE, RUNNING, TrialRecord
from ._common import (
    _ABSENT,
    _MAX_FAILED_ROWS,
    FIGURES,
    OPTIONAL_FIGURES,
    _Data,
    _finite,
    _last_line,
    _load,
    _text,
)
from ._plots import (
    _figures,
)

if TYPE_CHECKING:
    from ..registry import Registry


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


def _params_text(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_text(v)}" for k, v in sorted(params.items())) or "(none)"


def _summary(data: _Data, board: Sequence[TrialRecord]) -> str:
    exp = data.exp
    states = Counter(t.state for t in data.trials)
    best = board[0] if board else None
    rows: list[list[Any]] = [
        ["status", exp.status],
        ["created", _when(exp.created)],
        ["trials", len(data.trials)],
        ["by state", ", ".join(f"{k}: {v}" for k, v in sorted(states.items())) or "-"],
        ["best value", "-" if best is None else best.value],
        ["best trial", "-" if best is None else best.number],
        ["best params", "-" if best is None else _params_text(best.params)],
        ["data fingerprint", exp.data_fingerprint or "-"],
    ]
    for key, value in sorted(exp.cluster.items()):
        shown = _bytes(value) if key.endswith("bytes") else value
        rows.append([f"cluster {key}", "-" if value is None else shown])
    return _table(["field", "value"], rows, "summary")


def _leaderboard(board: Sequence[TrialRecord]) -> str:
    if not board:
        return "<p>No completed trial yet.</p>"
    params = sorted({p for t in board for p in t.params})
    metrics = sorted({m for t in board for m in t.scores})
    header = ["rank", "number", "value", *(f"mean {m}" for m in metrics), "duration (s)"]
    rows = []
    for rank, t in enumerate(board, 1):
        means = [
            math.fsum(t.scores[m]) / len(t.scores[m]) if t.scores.get(m) else _ABSENT
            for m in metrics
        ]
        duration = t.duration if t.duration is not None else _ABSENT
        rows.append(
            [rank, t.number, t.value, *means, duration, *(t.params.get(p, _ABSENT) for p in params)]
        )
    return _table([*header, *params], rows, "leaderboard")


def _failures(trials: Sequence[TrialRecord]) -> str:
    failed = [t for t in trials if t.state not in (COMPLETE, RUNNING)]
    if not failed:
        return "<p>None.</p>"
    parts = []
    causes = Counter(_last_line(t.error) or "(no error message)" for t in failed)
    if len(failed) > 1:
        parts.append("<h3>By error</h3>")
        parts.append(
            _table(["trials", "error (last line)"], [[n, c] for c, n in causes.most_common(20)])
        )
        if len(causes) > 20:
            parts.append(f"<p>… and {len(causes) - 20:,} other errors.</p>")
    rows = [
        [t.number, t.state, t.worker or "-", t.retries, _last_line(t.error) or "-"]
        for t in failed[:_MAX_FAILED_ROWS]
    ]
    if len(failed) > 1:
        parts.append("<h3>Trials</h3>")
    parts.append(_table(["number", "state", "worker", "retries", "error (last line)"], rows))
    if len(failed) > _MAX_FAILED_ROWS:
        parts.append(f"<p>The first {_MAX_FAILED_ROWS:,} of {len(failed):,} are listed.</p>")
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


def _html(
    data: _Data, board: Sequence[TrialRecord], figures: Mapping[str, tuple[bytes, str]]
) -> str:
    from .. import __version__

    e = html.escape
    exp = data.exp
    generated = _when(_dt.datetime.now(tz=_dt.timezone.utc).timestamp())
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>dmlsearch report: {e(exp.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Experiment {e(exp.name)}</h1>",
        f"<p class='meta'>Experiment id {exp.id}; report generated {e(generated)} by "
        f"dmlsearch {e(__version__)}.</p>",
        "<h2>Summary</h2>",
        _summary(data, board),
        "<h2>Configuration</h2>",
        f"<details><summary>the configuration snapshot ({_count(len(exp.config), 'key')})"
        "</summary>"
        f"<pre>{e(json.dumps(exp.config, indent=2, default=str))}</pre></details>",
        "<h2>Package versions</h2>",
        _table(["package", "version"], sorted(exp.package_versions.items()))
        if exp.package_versions
        else "<p>None recorded.</p>",
        f"<h2>Leaderboard</h2>{_leaderboard(board)}",
    ]
    for name, (png, caption) in figures.items():
        title = {**FIGURES, **OPTIONAL_FIGURES}[name]
        data_uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        parts.append(f"<h2>{e(title)}</h2><figure><img alt='{e(title)}' src='{data_uri}'>")
        if caption:
            parts.append(f"<figcaption>{e(caption)}</figcaption>")
        parts.append("</figure>")
    parts.append(f"<h2>Failed trials</h2>{_failures(data.trials)}")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(registry: Registry, experiment: str | int, path: str | os.PathLike[str]) -> Path:
    """Write one self-contained HTML report of ``experiment`` to ``path``; return the path.

    Parent folders are created; an existing file is replaced only once the new one is
    complete. Raises the registry's ``NotFoundError`` for an unknown experiment.
    """
    data = _load(registry, experiment)
    board = registry.store.leaderboard(data.exp.id, k=10)
    text = _html(data, board, _figures(registry, data))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target, then renamed: a reader never sees half a report.
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
