"""The dashboard page's own script, run by the Node.js that Playwright (a test extra) ships."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import playwright

PAGE = Path(__file__).resolve().parents[1] / "dmlsearch" / "dashboard" / "page.html"
NODE = Path(playwright.__file__).parent / "driver" / "node"


def _function(name: str) -> str:
    """The source of a top-level ``function name(...) {...}`` of the page's script."""
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(rf"^function {name}\(.*?^}}$", text, re.S | re.M)
    assert match is not None, name
    return match.group(0)


def test_page_names_the_metric_as_the_cli_does() -> None:
    cases = [
        ({"metric": "score", "scoring": "accuracy"}, "accuracy"),  # one scorer, by name
        ({"metric": "score", "scoring": None}, "score"),  # the estimator's own score
        ({"metric": "roc_auc", "scoring": None}, "roc_auc"),  # refit metric of several
        ({"metric": "score"}, "score"),  # a scheduler fed by an older dmlsearch
        ({}, "score"),
    ]
    script = _function("metricName") + "\nconst cases = " + json.dumps([c for c, _ in cases])
    script += ";\nconsole.log(JSON.stringify(cases.map(metricName)));\n"
    out = subprocess.run(
        [str(NODE), "-e", script], check=True, capture_output=True, text=True, timeout=30
    )
    assert json.loads(out.stdout) == [name for _, name in cases]
    # The tables head the value column with that name, as `dmlsearch show` does.
    render = _function("render")
    assert '"metric: " + metricName(exp.meta)' in render
    # dmlsearch.optimize's objective has one value, no folds: "value" there.
    assert render.count('value = optimizing ? "value" : "mean_test_" + metricName(exp.meta)') == 1
    assert render.count('"value"') == 1
