"""``dmlsearch show`` counts an experiment's trials by state without reading every trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dmlsearch import Registry
from dmlsearch.cli import app
from dmlsearch.testing.registry_contract import make_trial


def _show(url: str, *args: str) -> Any:
    result = CliRunner().invoke(app, ["show", "exp", "--registry", url, *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result


def _registry(tmp_path: Path, states: list[str]) -> str:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Registry(url, artifacts=str(tmp_path / "a")) as registry:
        exp = registry.store.create_experiment("exp", config={"scoring": "'accuracy'"})
        trials = [
            make_trial(
                exp.id,
                n,
                state=state,
                value=0.5 + n / 100 if state == "complete" else None,
                params={"C": float(n)},
            )
            for n, state in enumerate(states)
        ]
        registry.store.record_trials(exp.id, trials)
        registry.store.set_experiment_status(exp.id, "complete")
    return url


def _refuse_reading_every_trial(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Reading the experiment's trials (the DataFrame, or the records) is an error."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("show read every trial to count their states")

    with Registry(url) as registry:
        store = type(registry.store)
    monkeypatch.setattr(Registry, "trials", refuse)
    monkeypatch.setattr(store, "trials_dataframe", refuse)
    monkeypatch.setattr(store, "get_trials", refuse)


def test_show_counts_states_without_reading_the_trials(tmp_path, monkeypatch):
    states = ["complete"] * 5 + ["failed"] * 3 + ["timeout"] * 2 + ["running", "stopped"]
    states += ["cancelled", "complete"]
    url = _registry(tmp_path, states)
    _refuse_reading_every_trial(monkeypatch, url)
    shown = json.loads(_show(url, "--json", "-k", "3").stdout)
    counts = {"complete": 6, "failed": 3, "timeout": 2, "cancelled": 1, "running": 1}
    assert shown["trials"] == counts | {"stopped": 1}
    assert list(shown["trials"]) == [*counts, "stopped"]  # most first, then by name
    assert [row["number"] for row in shown["leaderboard"]] == [13, 4, 3]
    first = _show(url).stdout.splitlines()[0]
    assert first == (
        "exp (id 1, complete): 1 cancelled, 6 complete, 3 failed, 1 running, 1 stopped, 2 timeout"
    )


def test_show_counts_a_state_it_does_not_know(tmp_path):
    url = _registry(tmp_path, ["complete", "pruned", "complete", "pruned", "pruned"])
    assert json.loads(_show(url, "--json").stdout)["trials"] == {"pruned": 3, "complete": 2}
    assert _show(url).stdout.splitlines()[0] == "exp (id 1, complete): 2 complete, 3 pruned"


def test_show_of_an_experiment_without_trials(tmp_path, monkeypatch):
    url = _registry(tmp_path, [])
    _refuse_reading_every_trial(monkeypatch, url)
    assert json.loads(_show(url, "--json").stdout)["trials"] == {}
    lines = _show(url).stdout.splitlines()
    assert lines == ["exp (id 1, complete): no trials", "no completed trials yet"]
