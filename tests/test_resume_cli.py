"""``dmlsearch resume`` of a search with nothing left to run, or on other folds."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dmlsearch import Registry
from dmlsearch.cli import app

pytestmark = pytest.mark.cluster

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"
SMALL = ["--set", "search.n_trials=3", "--set", "search.cv=2", "--no-progress"]
# Nothing listens there: a command that tried to reach a cluster would fail (exit 2).
NO_CLUSTER = ["--set", "cluster.address=tcp://127.0.0.1:9"]


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def ran(tmp_path: Path, client, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    """The quickstart run with 3 trials on the test cluster, in a registry of its own:
    that registry's URL, and the options that point a command at both."""
    monkeypatch.delenv("DMLSEARCH_ARTIFACTS", raising=False)
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    address = ["--set", f"cluster.address={client.scheduler.address}", "--registry", url]
    result = invoke("run", QUICKSTART, *SMALL, *address)
    assert result.exit_code == 0, result.output
    return url, address


def test_resume_of_a_complete_search_reports_it_and_starts_nothing(
    ran: tuple[str, list[str]],
) -> None:
    url, address = ran
    nowhere = [*NO_CLUSTER, "--registry", url]

    again = invoke("resume", QUICKSTART, *SMALL, *nowhere)
    assert again.exit_code == 0, again.output
    assert "'quickstart-digits' is already complete: 3 trials recorded" in again.stderr
    assert (
        "model quickstart-digits v1 (trial " in again.stderr and "best accuracy: " in again.stderr
    )
    out = json.loads(invoke("resume", QUICKSTART, *SMALL, *nowhere, "--json").stdout)
    assert out["complete"] is True and out["kind"] == "search" and out["n_trials"] == 3
    assert out["model"] == {"name": "quickstart-digits", "version": 1}
    # Fewer trials than recorded: said so, nothing runs.
    fewer = invoke("resume", QUICKSTART, *SMALL, "--set", "search.n_trials=2", *nowhere)
    assert fewer.exit_code == 0, fewer.output
    assert "3 trials recorded, more than the 2 the file asks for" in fewer.stderr
    with Registry(url) as registry:
        assert [v.version for v in registry.versions("quickstart-digits")] == [1]
        assert registry.experiment("quickstart-digits").status == "complete"

    # More trials: it runs, on the same folds only.
    other_folds = (
        "search.cv={class: sklearn.model_selection.KFold, "
        "params: {n_splits: 2, shuffle: true, random_state: 1}}"
    )
    refused = invoke("resume", QUICKSTART, *SMALL, "--set", "search.n_trials=4",
                     "--set", other_folds, *address)  # fmt: skip
    assert refused.exit_code == 2, refused.output
    assert "the cv folds changed (2 as before" in refused.stderr
    with Registry(url) as registry:
        assert len(registry.trials("quickstart-digits")) == 3


def test_resume_force_skips_the_still_running_check_for_this_command_only(
    ran: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from dmlsearch._experiment import FORCE_RESUME

    monkeypatch.delenv(FORCE_RESUME, raising=False)
    url, address = ran
    with Registry(url) as registry:  # as a driver on another host leaves it, active just now
        exp = registry.experiment("quickstart-digits")
        driver = {"host": "elsewhere", "pid": 1, "opened": time.time()}
        registry.store.set_experiment_config(exp.id, {**exp.config, "driver": driver})
        registry.store.set_experiment_status(exp.id, "running")

    more = ["--set", "search.n_trials=4"]
    refused = invoke("resume", QUICKSTART, *SMALL, *more, *address)
    assert refused.exit_code == 2, refused.output
    assert "another driver may still be running it" in refused.stderr
    assert f"`dmlsearch resume {shlex.quote(str(QUICKSTART))} --force`" in refused.stderr
    forced = invoke("resume", QUICKSTART, *SMALL, *more, *address, "--force")
    assert forced.exit_code == 0, forced.output
    assert FORCE_RESUME not in os.environ  # nothing left set for what runs next
    with Registry(url) as registry:
        assert len(registry.trials("quickstart-digits")) == 4
        assert registry.experiment("quickstart-digits").status == "complete"


def test_a_running_experiment_is_not_deleted_or_overwritten_without_force(
    ran: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A probe deleted (or overwrote) an experiment a driver on this host still ran: that
    # driver failed with two tracebacks.
    import socket
    import subprocess
    import sys

    from dmlsearch._experiment import FORCE_RESUME

    monkeypatch.delenv(FORCE_RESUME, raising=False)
    url, address = ran
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Registry(url) as registry:  # as a live driver on this host leaves it
            exp = registry.experiment("quickstart-digits")
            mine = {"host": socket.gethostname(), "pid": driver.pid}
            registry.store.set_experiment_config(exp.id, {**exp.config, "driver": mine})
            registry.store.set_experiment_status(exp.id, "running")
        for args, words in (
            (("delete", "quickstart-digits", "--yes", "--registry", url),
             "`dmlsearch delete NAME --force`"),
            (("run", QUICKSTART, *SMALL, *address, "--overwrite"),
             f"`dmlsearch run {shlex.quote(str(QUICKSTART))} --overwrite --force`"),
        ):  # fmt: skip
            refused = invoke(*args)
            assert refused.exit_code == 2, refused.output
            assert f"process {driver.pid} on this host" in refused.stderr
            assert words in refused.stderr
        with Registry(url) as registry:
            assert len(registry.trials("quickstart-digits")) == 3  # nothing deleted
        alone = invoke("run", QUICKSTART, *SMALL, *address, "--force")
        assert alone.exit_code == 2 and "only with --overwrite" in alone.stderr
        forced = invoke("delete", "quickstart-digits", "--yes", "--registry", url, "--force")
        assert forced.exit_code == 0, forced.output
        assert FORCE_RESUME not in os.environ
    finally:
        driver.kill()
        driver.wait()


def test_our_warnings_are_plain_lines_on_stderr(ran: tuple[str, list[str]]) -> None:
    # Found by a probe: Python's format printed dmlsearch's source file and line.
    url, address = ran
    with Registry(url) as registry:  # as a SIGTERMed run leaves it, with 3 trials
        registry.store.set_experiment_status(
            registry.experiment("quickstart-digits").id, "interrupted"
        )
    fewer = invoke("resume", QUICKSTART, *SMALL, "--set", "search.n_trials=2", *address)
    assert fewer.exit_code == 0, fewer.output
    assert "warning: experiment 'quickstart-digits' already records 3 trials" in fewer.stderr
    assert ".py:" not in fewer.stderr and "UserWarning" not in fewer.stderr
