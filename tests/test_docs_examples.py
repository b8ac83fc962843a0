"""Every Python example of README.md and docs/*.md runs, as a script in a fresh folder.

Conventions for the pages (the comment goes on the line before the fenced block):

- a plain ```python block is a complete script: it is run with ``python`` in an empty folder
  holding a copy of ``experiments/``, with no registry configured;
- ``<!-- test: continues -->``: the block goes on from the previous runnable block of the
  same page (it is appended to that script, indented as its last line), e.g. reading the
  attributes of the search the block above fitted;
- ``<!-- test: after-quickstart -->``: run in the folder where ``dmlsearch run
  experiments/quickstart.yaml`` has just run (it reads that registry);
- ``<!-- no-test: why -->``: not run; the reason is required (a signature, an address of a
  cluster the reader has, a package the tests do not install).

Examples are kept small (few trials, cv=3, small data); most of each script's time is
importing torch and scikit-learn and starting its cluster's worker processes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Seconds per script, a guard against a hang: each takes 10-30 s on two cores, up to twice
# that while the other test process runs a cluster too, and more on a loaded machine.
TIMEOUT = 240

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARK = re.compile(r"<!--\s*(no-test|test)\s*:?\s*(.*?)\s*-->")


@dataclass
class Example:
    page: Path
    line: int
    code: str
    mark: str | None = None  # "no-test", "continues", "after-quickstart"
    reason: str = ""
    parts: list[Example] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"

    def script(self) -> str:
        out = self.code
        for part in self.parts:
            last = [ln for ln in out.splitlines() if ln.strip()][-1]
            indent = last[: len(last) - len(last.lstrip())]
            if last.rstrip().endswith(":"):
                indent += "    "
            out = out.rstrip("\n") + "\n" + textwrap.indent(part.code, indent)
        return out


def _blocks(page: Path) -> list[Example]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        if match.group(1) != "python":
            continue
        before = text[: match.start()].rstrip().splitlines()
        previous = before[-1] if before else ""
        mark = _MARK.search(previous)
        kind, reason = (None, "")
        if mark is not None:
            kind = mark.group(1) if mark.group(1) == "no-test" else mark.group(2).strip()
            reason = mark.group(2).strip()
        line = text.count("\n", 0, match.start()) + 1
        found.append(Example(page, line, match.group(2), kind, reason))
    return found


def _examples() -> tuple[list[Example], list[Example]]:
    """(scripts run in an empty folder, scripts run after the quickstart)."""
    plain: list[Example] = []
    after: list[Example] = []
    for page in PAGES:
        last: Example | None = None
        for block in _blocks(page):
            if block.mark == "no-test":
                continue
            if block.mark == "continues":
                assert last is not None, f"{block.id}: nothing above to continue"
                last.parts.append(block)
                continue
            assert block.mark in (None, "after-quickstart"), f"{block.id}: mark {block.mark!r}"
            (after if block.mark == "after-quickstart" else plain).append(block)
            last = block
    return plain, after


PLAIN, AFTER_QUICKSTART = _examples()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSEARCH_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _folder(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "experiments", tmp_path / "experiments")
    return tmp_path


def _run_script(example: Example, folder: Path) -> None:
    script = folder / f"example_{example.page.stem}_{example.line}.py"
    script.write_text(example.script(), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, script.name],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, f"{example.id}\n{example.script()}\n{result.stderr[-4000:]}"
    stderr = _without_heartbeat_loss(result.stderr)
    assert "Traceback" not in stderr, stderr[-4000:]


# distributed's own log when a cluster the example made closes while a worker's heartbeat
# is on its way (seen under load): the record and its traceback, which ends in the
# CommClosedError.
# The embedded cluster's workers drop it (dmlsearch/runner/_worker_logging.py); a
# LocalCluster the user starts is distributed's to configure.
_HEARTBEAT_LOSS = re.compile(
    r"^\S+ \S+ - distributed\.worker - ERROR - Failed to communicate with scheduler during "
    r"heartbeat\.\n(?:.*\n)*?distributed\.comm\.core\.CommClosedError: .*\n?",
    re.MULTILINE,
)


def _without_heartbeat_loss(stderr: str) -> str:
    return _HEARTBEAT_LOSS.sub("", stderr)


def test_only_the_heartbeat_loss_record_is_left_out() -> None:
    lost = (
        "2026-12-06 21:48:35,849 - distributed.worker - ERROR - Failed to communicate with "
        'scheduler during heartbeat.\nTraceback (most recent call last):\n  File "x", line 1\n'
        "distributed.comm.core.CommClosedError: Stream is closed\n"
    )
    other = "2026-12-06 21:48:39,832 - distributed.nanny - WARNING - still alive, killing\n"
    ours = "Traceback (most recent call last):\nValueError: ours\n"
    assert _without_heartbeat_loss(lost + other) == other
    assert _without_heartbeat_loss(lost + other + ours) == other + ours
    assert _without_heartbeat_loss(other + lost) == other
    assert _without_heartbeat_loss(ours + lost + ours) == ours + ours


def test_every_skipped_block_says_why() -> None:
    assert len(PLAIN) >= 5 and AFTER_QUICKSTART
    for page in PAGES:
        for block in _blocks(page):
            if block.mark == "no-test":
                assert block.reason, f"{block.id}: write <!-- no-test: why -->"


def test_every_example_that_starts_a_cluster_has_the_main_guard() -> None:
    """Without it a script's embedded LocalCluster floods the terminal with errors."""
    starts = re.compile(r"\.fit\(|run_experiment\(")
    for page in PAGES:
        for block in _blocks(page):
            runnable = block.mark not in ("no-test", "continues")
            if "LocalCluster(" in block.code or (runnable and starts.search(block.code)):
                assert 'if __name__ == "__main__":' in block.code, block.id


@pytest.mark.parametrize("example", PLAIN, ids=[e.id for e in PLAIN])
def test_example_runs_as_a_script(example: Example, tmp_path: Path) -> None:
    _run_script(example, _folder(tmp_path))


def test_quickstart_commands_then_the_pages_that_read_its_registry(tmp_path: Path) -> None:
    """docs/quickstart.md's commands, as written, with fewer trials (--set)."""
    folder = _folder(tmp_path)
    page = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    block = re.search(r"## From an experiment file.*?```bash\n(.*?)```", page, re.S)
    assert block is not None
    commands = [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]
    assert [c.split()[:2] for c in commands] == [
        ["dmlsearch", "validate"],
        ["dmlsearch", "run"],
        ["dmlsearch", "show"],
        ["dmlsearch", "report"],
    ]
    dmlsearch = str(Path(sys.executable).with_name("dmlsearch"))
    for command in commands:
        args = command.split()[1:]
        if args[0] == "run":
            args += ["--set", "search.n_trials=4", "--no-progress"]
        result = subprocess.run(
            [dmlsearch, *args],
            cwd=folder,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert result.returncode == 0, (command, result.stdout, result.stderr)
    assert (folder / "report.html").is_file() and (folder / "dmlsearch.db").is_file()
    for example in AFTER_QUICKSTART:
        _run_script(example, folder)
