"""The ``dmlsearch`` command line, end to end: real searches, real registries, real clusters."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from typer.testing import CliRunner

from dmlsearch import Registry
from dmlsearch.cli import app

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
SMALL = ["--set", "search.n_trials=3", "--set", "search.cv=2", "--no-progress"]


def invoke(*args: str | Path) -> Any:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def ok_json(*args: str | Path) -> Any:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_clean_failure(result: Any, code: int, *texts: str) -> None:
    """Exit code ``code``, the message on stderr, no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    for text in texts:
        assert text in result.stderr, result.stderr


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory with no registry configured: ./dmlsearch.db is used."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DMLSEARCH_REGISTRY", raising=False)
    monkeypatch.delenv("DMLSEARCH_ARTIFACTS", raising=False)
    return tmp_path


def test_help_is_fast_and_imports_nothing_heavy() -> None:
    code = (
        "import sys, dmlsearch.cli\n"
        "heavy = [m for m in ('sklearn', 'distributed', 'sqlalchemy', 'pydantic', 'pandas') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run(
        [sys.executable, "-m", "dmlsearch", "--help"], check=True, capture_output=True, text=True
    ).stdout
    for command in ("init", "validate", "run", "resume", "list", "show", "report", "registry"):
        assert command in out


def test_init_validate_and_run_the_starter(in_tmp: Path, client: Client) -> None:
    result = invoke("init")
    assert result.exit_code == 0 and (in_tmp / "experiment.yaml").exists()
    assert_clean_failure(invoke("init"), 2, "exists; pass --force")
    assert invoke("init", "--force").exit_code == 0
    summary = ok_json("validate", "experiment.yaml")
    assert summary["valid"] and summary["parameters"] == ["clf__C", "clf__gamma"]
    address = client.scheduler.address
    out = ok_json("run", "experiment.yaml", *SMALL, "--set", f"cluster.address={address}")
    assert out["experiment"] == "digits-svc" and out["n_trials"] == 3 and out["failed"] == 0
    assert 0.5 < out["best_score"] <= 1 and set(out["best_params"]) == {"clf__C", "clf__gamma"}
    assert out["model"] == {"name": "digits-svc", "version": 1}
    assert (in_tmp / "dmlsearch.db").exists()


def test_quickstart_on_the_embedded_default_then_inspect(in_tmp: Path, client: Client) -> None:
    """The one run on the embedded default: LocalCluster + SQLite registry in the cwd."""
    quickstart = EXPERIMENTS / "quickstart.yaml"
    start = time.perf_counter()
    result = invoke("run", quickstart, "--set", "search.n_trials=4", "--set", "search.cv=2")
    assert result.exit_code == 0, result.output
    assert time.perf_counter() - start < 60
    assert "Dask dashboard: http://127.0.0.1:" in result.stderr  # the progress output
    assert (
        "best accuracy:" in result.stdout
        and "registered model quickstart-digits v1" in result.stdout
    )
    assert (in_tmp / "dmlsearch.db").exists() and (in_tmp / "dmlsearch-artifacts").is_dir()

    listed = ok_json("list")
    assert [(e["name"], e["status"], e["trials"]) for e in listed] == [
        ("quickstart-digits", "complete", 4)
    ]
    shown = ok_json("show", "quickstart-digits", "-k", "2")
    assert shown["trials"] == {"complete": 4} and len(shown["leaderboard"]) == 2
    assert shown["leaderboard"][0]["value"] >= shown["leaderboard"][1]["value"]
    human = invoke("show", "quickstart-digits")
    assert human.exit_code == 0 and "param_clf__C" in human.stdout
    assert_clean_failure(invoke("show", "quickstart-digit"), 2, "did you mean 'quickstart-digits'")

    # Running it again is refused (before any cluster starts); resume continues it.
    assert_clean_failure(invoke("run", quickstart, *SMALL), 2, "already exists", "dmlsearch resume")
    address = client.scheduler.address
    out = ok_json(
        "resume",
        quickstart,
        "--set",
        "search.n_trials=6",
        "--set",
        "search.cv=2",
        "--set",
        f"cluster.address={address}",
        "--no-progress",
    )
    assert out["n_trials"] == 6  # 4 recorded + 2 new: n_trials is the total
    assert ok_json("list")[0]["trials"] == 6

    # The registry commands.
    models = ok_json("registry", "models")
    assert models == [{"model": "quickstart-digits", "versions": 2, "latest": 2, "aliases": ""}]
    assert invoke("registry", "alias", "set", "quickstart-digits", "champion", "1").exit_code == 0
    versions = ok_json("registry", "versions", "quickstart-digits")
    assert [v["aliases"] for v in versions] == [["champion"], []]
    assert versions[0]["lineage"]["experiment"] == "quickstart-digits"
    assert_clean_failure(
        invoke("registry", "alias", "set", "quickstart-digits", "x", "9"), 2, "no version 9"
    )
    assert ok_json("registry", "verify") == [
        {"model": "quickstart-digits", "version": 1, "ok": True},
        {"model": "quickstart-digits", "version": 2, "ok": True},
    ]
    assert "2 of 2 versions verified" in invoke("registry", "verify").stdout

    # The report (dmlsearch.report.write_report) on the same registry.
    result = invoke("report", "quickstart-digits", "-o", in_tmp / "out.html")
    assert result.exit_code == 0, result.output
    html = (in_tmp / "out.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "quickstart-digits" in html

    # gc removes the blob of a deleted version; verify fails (exit 1) on a corrupt one.
    with Registry(f"sqlite:///{in_tmp / 'dmlsearch.db'}") as registry:
        registry.delete_version("quickstart-digits", 2)
        kept = registry.versions("quickstart-digits")[0]
    assert len(ok_json("registry", "gc")["removed"]) == 1
    Path(kept.artifact_uri).write_bytes(b"tampered")
    result = invoke("registry", "verify")
    assert result.exit_code == 1 and "CORRUPT or MISSING: quickstart-digits v1" in result.stderr


@pytest.mark.parametrize(
    ("example", "extra"),
    [
        ("xgboost_csv.yaml", ["--set", "cluster.local=null"]),
        ("loader.yaml", []),
    ],
)
def test_examples_run_on_a_cluster(
    example: str, extra: list[str], in_tmp: Path, client: Client
) -> None:
    address = client.scheduler.address
    out = ok_json(
        "run",
        EXPERIMENTS / example,
        *SMALL,
        *extra,
        "--set",
        f"cluster.address={address}",
        "--registry",
        f"sqlite:///{in_tmp / 'other.db'}",
    )
    assert out["n_trials"] == 3 and out["failed"] == 0
    assert 0.5 < out["best_score"] <= 1
    assert (in_tmp / "other.db").exists() and not (in_tmp / "dmlsearch.db").exists()
    listed = ok_json("list", "--registry", f"sqlite:///{in_tmp / 'other.db'}")
    assert listed[0]["name"] == out["experiment"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def scheduler_and_worker(tmp_path: Path) -> Iterator[str]:
    """A real `dask scheduler` and `dask worker`, as a user would start them."""
    dask = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    assert dask is not None
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}
    logs = tmp_path / "logs.txt"
    with logs.open("w") as log:
        procs = [
            subprocess.Popen(
                [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            ),
        ]
        try:
            procs.append(
                subprocess.Popen(
                    [
                        dask,
                        "worker",
                        address,
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--no-dashboard",
                        "--local-directory",
                        str(tmp_path),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
            with Client(address, timeout="30s", set_as_default=False) as c:
                c.wait_for_workers(1, timeout=60)
            yield address
        finally:
            # Closing through the scheduler takes a second; SIGTERM to a nanny takes ~8.
            try:
                with Client(address, timeout="5s", set_as_default=False) as c:
                    c.shutdown()
            except (OSError, TimeoutError):
                pass
            for proc in reversed(procs):
                if proc.poll() is None:
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        proc.terminate()
            for proc in reversed(procs):
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()


def test_scheduler_address_example(in_tmp: Path, scheduler_and_worker: str) -> None:
    out = ok_json(
        "run",
        EXPERIMENTS / "scheduler_address.yaml",
        *SMALL,
        "--set",
        f"cluster.address={scheduler_and_worker}",
    )
    assert out["experiment"] == "wine-random-forest" and out["n_trials"] == 3
    assert out["failed"] == 0 and 0.5 < out["best_score"] <= 1


# -- bad input: one clear message, exit code 2, no traceback -----------------------------------


def test_validate_reports_every_problem(in_tmp: Path) -> None:
    bad = in_tmp / "bad.yaml"
    bad.write_text(
        "version: 1\nname: bad\ndata:\n  dataset: sklearn:load_digits\n"
        "model: {class: sklearn.svm.SVC, params: {C: -1}}\n"
        "search:\n  space:\n    c: {type: float, low: 1e-3, high: 1e-4}\n  n_trails: 3\n"
    )
    result = invoke("validate", bad)
    assert_clean_failure(
        result,
        2,
        "3 problems",
        "model.params.C (line 5)",
        "search.space.c.low (line 8): low=0.001 is greater than high=0.0001; swap them",
        "search.n_trails (line 9): unknown key 'n_trails'; did you mean 'n_trials'?",
    )
    data = json.loads(invoke("validate", bad, "--json").stdout)
    assert data["valid"] is False
    assert {(e["path"], e["line"]) for e in data["errors"]} == {
        ("model.params.C", 5),
        ("search.space.c.low", 8),
        ("search.n_trails", 9),
    }
    human = invoke("validate", EXPERIMENTS / "quickstart.yaml")
    assert human.exit_code == 0 and "valid" in human.stdout


@pytest.mark.parametrize(
    ("args", "texts"),
    [
        (
            [
                "--set",
                "data.path=nowhere.csv",
                "--set",
                "data.target=y",
                "--set",
                "data.dataset=null",
            ],
            ["data.path", "no such file", "nowhere.csv"],
        ),
        (
            ["--set", "model.steps.clf.class=sklearn.svm.SVCC"],
            ["model.steps.clf.class", "did you mean 'SVC'"],
        ),
        (
            ["--set", "cluster={address: 'tcp://127.0.0.1:9', connect_timeout: 1}"],
            ["cluster.address: cannot reach a Dask scheduler at tcp://127.0.0.1:9"],
        ),
        (["--set", "search.n_trials"], ["expected key.path=value"]),
        (["--set", "version=2"], ["schema version 2", "upgrade dmlsearch"]),
    ],
)
def test_run_refuses_bad_input_with_one_line(
    in_tmp: Path, args: list[str], texts: list[str]
) -> None:
    result = invoke("run", EXPERIMENTS / "quickstart.yaml", "--no-progress", *args)
    assert_clean_failure(result, 2, *texts)
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_file_and_unknown_names(in_tmp: Path) -> None:
    assert_clean_failure(invoke("validate", "nope.yaml"), 2, "nope.yaml: no such file")
    # Reading commands never create a registry where there is none.
    assert_clean_failure(invoke("list"), 2, "no registry at sqlite:///")
    assert not (in_tmp / "dmlsearch.db").exists()
    url = f"sqlite:///{in_tmp / 'empty.db'}"
    Registry(url).close()
    assert_clean_failure(invoke("show", "nothing", "--registry", url), 2, "no experiment 'nothing'")
    assert_clean_failure(invoke("report", "nothing", "--registry", url), 2, "no experiment")
    assert ok_json("list", "--registry", url) == []
    assert ok_json("registry", "models", "--registry", url) == []
    assert_clean_failure(
        invoke("registry", "versions", "nothing", "--registry", url), 2, "no model 'nothing'"
    )
