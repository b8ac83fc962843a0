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

from dmlsearch import InvalidParameterError, Registry
from dmlsearch.cli import app
from dmlsearch.registry import NotFoundError

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
    # A new version only when the best trial changed: the same trial's model again
    # would be a duplicate of v1.
    best_before = shown["leaderboard"][0]["number"]
    assert out["model"] == {
        "name": "quickstart-digits",
        "version": 1 if out["best_trial"] == best_before else 2,
    }
    if out["best_trial"] == best_before:
        with Registry(f"sqlite:///{in_tmp / 'dmlsearch.db'}") as registry:
            registry.register_model("quickstart-digits", registry.load_model("quickstart-digits"))

    # The registry commands.
    models = ok_json("registry", "models")
    assert models == [{"model": "quickstart-digits", "versions": 2, "latest": 2, "aliases": {}}]
    assert invoke("registry", "alias", "set", "quickstart-digits", "champion", "1").exit_code == 0
    versions = ok_json("registry", "versions", "quickstart-digits")
    assert [v["aliases"] for v in versions] == [["champion"], []]
    assert versions[0]["lineage"]["experiment"] == "quickstart-digits"
    assert_clean_failure(
        invoke("registry", "alias", "set", "quickstart-digits", "x", "9"), 2, "no version 9"
    )
    assert ok_json("registry", "verify") == [
        {"model": "quickstart-digits", "version": 1, "ok": True, "error": None},
        {"model": "quickstart-digits", "version": 2, "ok": True, "error": None},
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
    assert len(ok_json("registry", "gc", "--grace", "0")["removed"]) == 1
    Path(kept.artifact_uri).write_bytes(b"tampered")
    result = invoke("registry", "verify")
    assert result.exit_code == 1 and "CORRUPT or MISSING: quickstart-digits v1" in result.stderr
    assert kept.artifact_uri in result.stderr  # the path, to look at
    verified = invoke("registry", "verify", "--json")
    assert verified.exit_code == 1
    assert kept.artifact_uri in json.loads(verified.stdout)[0]["error"]


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


def test_scheduler_and_ensemble_sections_run_and_show(in_tmp: Path, client: Client) -> None:
    address = client.scheduler.address
    common = ["--no-progress", "--set", f"cluster.address={address}"]
    out = ok_json("run", EXPERIMENTS / "asha_sgd.yaml", *common, "--set", "search.n_trials=8")
    assert out["n_trials"] == 8 and out["failed"] == 0 and out["ensembles"] == []
    out = ok_json(
        "run", EXPERIMENTS / "ensemble_selection.yaml", *common, "--set", "search.n_trials=6"
    )
    assert out["n_trials"] == 6 and len(out["ensembles"]) == 1
    ensemble = out["ensembles"][0]
    assert ensemble["name"] == "trees-ensemble-wine-ensemble" and ensemble["version"] == 1
    assert sum(ensemble["weights"]) == pytest.approx(1.0)
    assert 0.5 < ensemble["oof_score"] <= 1  # accuracy over all out-of-fold rows
    assert set(ensemble["trials"]) <= set(range(6))
    shown = ok_json("show", "trees-ensemble-wine")
    assert shown["ensembles"] == [{**ensemble, "oof_score": pytest.approx(ensemble["oof_score"])}]
    assert (
        "ensemble trees-ensemble-wine-ensemble v1" in invoke("show", "trees-ensemble-wine").stdout
    )
    with Registry(f"sqlite:///{in_tmp / 'dmlsearch.db'}") as registry:
        loaded = registry.load_model("trees-ensemble-wine-ensemble")
        assert loaded.members_ == ensemble["trials"]
        # As if the run had stopped while selecting: the search complete, no ensemble.
        registry.delete_version("trees-ensemble-wine-ensemble", 1)
    again = ok_json(
        "resume", EXPERIMENTS / "ensemble_selection.yaml", *common, "--set", "search.n_trials=6"
    )  # it was "already complete", and the ensemble never came
    assert again["n_trials"] == 6 and len(again["ensembles"]) == 1
    assert again["ensembles"][0]["trials"] == ensemble["trials"]


def test_a_training_job_runs_is_shown_and_listed(in_tmp: Path, client: Client) -> None:
    example = EXPERIMENTS / "train_mlp.yaml"
    address = client.scheduler.address
    common = ["--no-progress", "--set", "cluster.local=null", "--set", f"cluster.address={address}"]
    checked = invoke("validate", example)
    assert "training job of models:mlp (10 epochs, 2 workers, sync allreduce)" in checked.stdout
    out = ok_json("run", example, *common, "--set", "train.epochs=4")
    assert (out["experiment"], out["kind"], out["sync"], out["world_size"]) == (
        "mlp-blobs",
        "train",
        "allreduce",
        2,
    )
    assert [e["epoch"] for e in out["epochs"]] == [1, 2, 3, 4]
    assert out["final_loss"] == out["epochs"][-1]["loss"] < out["epochs"][0]["loss"]
    assert all(e["samples_per_s"] > 0 for e in out["epochs"])
    assert out["model"] == {"name": "mlp-blobs", "version": 1}

    shown = ok_json("show", "mlp-blobs")
    assert (shown["kind"], shown["status"], shown["id"]) == (
        "train",
        "complete",
        out["experiment_id"],
    )
    assert shown["config"]["epochs"] == 4 and shown["config"]["module"] == "Sequential"
    assert shown["models"] == [
        {
            "name": "mlp-blobs",
            "version": 1,
            "epochs": 4,
            "final_loss": pytest.approx(out["final_loss"]),
            "samples_per_s": pytest.approx(sum(e["samples_per_s"] for e in out["epochs"]) / 4),
            "sync": "allreduce",
            "world_size": 2,
        }
    ]
    human = invoke("show", "mlp-blobs").stdout
    assert "training job of Sequential, 4 epochs on 2 workers, sync allreduce" in human
    # Its report is a training job's: the epochs and their plots, no leaderboard.
    reported = invoke("report", "mlp-blobs")
    assert reported.exit_code == 0, reported.output
    assert "wrote mlp-blobs.html" in reported.stdout
    page = (in_tmp / "mlp-blobs.html").read_text(encoding="utf-8")
    assert "<h1>Training job mlp-blobs</h1>" in page and "Leaderboard" not in page
    epochs = page.split("<table class='epochs'>", 1)[1].split("</table>", 1)[0]
    assert epochs.count("<tr>") == 1 + 4  # the header and one row per epoch
    assert page.count("<img alt=") == 2  # loss and throughput per epoch
    assert [(e["name"], e["kind"], e["status"], e["trials"]) for e in ok_json("list")] == [
        ("mlp-blobs", "train", "complete", 0)
    ]
    with Registry(f"sqlite:///{in_tmp / 'dmlsearch.db'}") as registry:
        version = registry.model_version("mlp-blobs")
        experiment = registry.experiment("mlp-blobs")
        assert version.lineage["experiment"] == "mlp-blobs"
        assert version.lineage["data_fingerprint"] == experiment.data_fingerprint
        import models  # experiments/models.py: the file's folder is on sys.path

        net = registry.load_model("mlp-blobs", module=models.mlp(20, 64, 3))
        assert net[0].in_features == 20

    # Again: refused before any cluster starts; a finished job has nothing to resume.
    assert_clean_failure(invoke("run", example, *common), 2, "already exists", "--overwrite")
    finished = invoke("resume", example, *common)
    assert finished.exit_code == 0, finished.output
    assert "training job 'mlp-blobs' is already complete" in finished.stderr
    again = invoke("run", example, *common, "--set", "train.epochs=2", "--overwrite")
    assert again.exit_code == 0, again.output
    assert "deleted the previous experiment 'mlp-blobs'" in again.stderr
    assert "trained 2 epochs on 2 workers (sync allreduce)" in again.stdout
    assert "registered model mlp-blobs v2" in again.stdout  # v1 is kept, as models are
    assert [m["version"] for m in ok_json("show", "mlp-blobs")["models"]] == [2]


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
    assert out["failed"] == 0 and out["stopped"] == 0 and 0.5 < out["best_score"] <= 1


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
            ["cluster.address: cannot reach a Dask scheduler at tcp://127.0.0.1:9", "refused"],
        ),
        (["--set", "search.n_trials"], ["expected key.path=value"]),
        (["--set", "version=2"], ["schema version 2", "upgrade dmlsearch"]),
        (
            ["--set", "registry.artifacts=nosuch://bucket/x"],
            ["registry.artifacts", "unknown protocol 'nosuch'"],
        ),
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


# -- help text ---------------------------------------------------------------------------------


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of the app, groups included."""
    import typer.main

    command = typer.main.get_command(app) if group is app else group
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_help_text_is_plain_and_complete() -> None:
    paths = list(_commands(app))
    assert ("registry", "alias", "delete") in paths and ("delete",) in paths
    for path in paths:
        result = invoke(*path, "--help")
        assert result.exit_code == 0, (path, result.output)
        # Flags are flags: no type placeholder beside them.
        assert "<bool>" not in result.output, (path, result.output)
    run_help = invoke("run", "--help").output
    # The example value survives (rich markup used to swallow "[a, b]").
    assert "read as YAML: 1e-3, true, [a, b])" in " ".join(run_help.split())
    assert "--progress / --no-progress" in run_help and "--overwrite" in run_help
    for path in [("init",), ("validate",), ("run",), ("resume",), ("show",), ("delete",)]:
        assert "Usage: dmlsearch " + " ".join(path) in invoke(*path, "--help").output


def test_version() -> None:
    from importlib.metadata import version

    for flag in ("--version", "-V"):
        result = invoke(flag)
        assert result.exit_code == 0 and result.stdout == f"dmlsearch {version('dmlsearch')}\n"


# -- no tracebacks for a newcomer's slips --------------------------------------------------------


def test_init_creates_folders_and_refuses_a_folder(in_tmp: Path) -> None:
    result = invoke("init", "sub/dir/exp.yaml")
    assert result.exit_code == 0, result.output
    assert (in_tmp / "sub" / "dir" / "exp.yaml").is_file()
    assert ok_json("validate", "sub/dir/exp.yaml")["valid"]
    for args in (["init", "sub"], ["init", "sub", "--force"]):
        assert_clean_failure(invoke(*args), 2, "sub is a folder", "sub/experiment.yaml")
    # The next commands it prints can be pasted into a shell as they are.
    spaced = invoke("init", "my dir/exp.yaml")
    assert "next: dmlsearch validate 'my dir/exp.yaml' && dmlsearch run 'my dir/exp.yaml'" in (
        spaced.stdout
    )


@pytest.mark.parametrize(
    "command", [["list"], ["show", "x"], ["registry", "models"], ["delete", "x", "--yes"]]
)
def test_a_registry_that_is_not_a_url(in_tmp: Path, command: list[str]) -> None:
    result = invoke(*command, "--registry", "foo.db")
    assert_clean_failure(result, 2, "--registry 'foo.db' is not a database URL", "sqlite:///foo.db")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (in_tmp / "foo.db").exists()


@pytest.mark.parametrize("artifacts", ["nosuch://bucket/x", "a-file"])
def test_an_artifact_store_that_cannot_work(in_tmp: Path, artifacts: str) -> None:
    (in_tmp / "a-file").write_text("not a folder")
    url = f"sqlite:///{in_tmp / 'reg.db'}"
    Registry(url).close()
    for command in (["registry", "verify"], ["registry", "gc"], ["delete", "x", "--yes"]):
        result = invoke(*command, "--registry", url, "--artifacts", artifacts)
        assert_clean_failure(result, 2, "as an artifact store", artifacts)
        assert len(result.stderr.strip().splitlines()) == 1


def test_run_with_a_registry_that_is_not_a_url(in_tmp: Path) -> None:
    result = invoke("run", EXPERIMENTS / "quickstart.yaml", "--registry", "foo.db", "--no-progress")
    assert_clean_failure(result, 2, "is not a database URL")
    assert len(result.stderr.strip().splitlines()) == 1


def test_environment_registry_that_is_not_a_url(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLSEARCH_REGISTRY", "runs.sqlite")
    result = invoke("list")
    assert_clean_failure(result, 2, "$DMLSEARCH_REGISTRY 'runs.sqlite'", "sqlite:///runs.sqlite")


def _missing_database_url() -> str:
    import sqlalchemy as sa

    from dmlsearch.testing.registry_contract import POSTGRES_URL

    url = sa.make_url(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL))
    return url.set(database="dmlsearch_no_such_db").render_as_string(hide_password=False)


@pytest.mark.parametrize(
    "command", [["list"], ["show", "x"], ["registry", "versions", "m"], ["registry", "gc"]]
)
def test_postgresql_database_that_does_not_exist(in_tmp: Path, command: list[str]) -> None:
    result = invoke(*command, "--registry", _missing_database_url())
    assert_clean_failure(result, 2, "dmlsearch_no_such_db", "does not exist")
    assert len(result.stderr.strip().splitlines()) == 1


def test_run_on_a_postgresql_database_that_does_not_exist(in_tmp: Path) -> None:
    result = invoke(
        "run",
        EXPERIMENTS / "quickstart.yaml",
        "--registry",
        _missing_database_url(),
        "--no-progress",
    )
    assert_clean_failure(result, 2, "dmlsearch_no_such_db", "does not exist")
    assert len(result.stderr.strip().splitlines()) == 1


def test_reading_an_empty_postgresql_database_creates_nothing(in_tmp: Path) -> None:
    import sqlalchemy as sa

    from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema

    with postgres_schema(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)) as url:
        for command in (["list"], ["show", "x"], ["registry", "models"]):
            assert_clean_failure(invoke(*command, "--registry", url), 2, "no registry at")
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                assert sa.inspect(conn).get_table_names() == []
        finally:
            engine.dispose()


def test_files_that_are_not_experiment_files(in_tmp: Path) -> None:
    (in_tmp / "folder").mkdir()
    (in_tmp / "broken.yaml").write_text("version: 1\nname: [unclosed\n")
    (in_tmp / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    cases = [
        ("folder", "is a folder"),
        ("broken.yaml", "invalid YAML"),
        ("latin1.yaml", "not UTF-8"),
        ("nope.yaml", "no such file"),
    ]
    for command in ("validate", "run", "resume"):
        for name, text in cases:
            extra = ["--no-progress"] if command != "validate" else []
            assert_clean_failure(invoke(command, name, *extra), 2, text)


def test_report_to_a_path_that_cannot_be_written(in_tmp: Path) -> None:
    url = _one_experiment(in_tmp)
    (in_tmp / "taken").write_text("a file, not a folder")
    result = invoke("report", "exp", "--registry", url, "-o", "taken/out.html")
    assert_clean_failure(result, 2, "taken")
    assert len(result.stderr.strip().splitlines()) == 1
    (in_tmp / "reports").mkdir()
    result = invoke("report", "exp", "--registry", url, "-o", "reports")
    assert_clean_failure(result, 2, "reports: is a folder: give the report a file name")


def test_report_into_a_read_only_folder(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was two tracebacks (the write's and the clean-up's) naming the temporary file, exit 1."""
    import errno

    url = _one_experiment(in_tmp)
    (in_tmp / "ro").mkdir()
    # What a read-only file system does (chmod does not stop root): every write raises EROFS.
    write_text, unlink = Path.write_text, Path.unlink

    def read_only(real: Any) -> Any:
        def method(self: Path, *args: Any, **kwargs: Any) -> Any:
            if self.parent.name == "ro":
                raise OSError(errno.EROFS, "Read-only file system", str(self))
            return real(self, *args, **kwargs)

        return method

    monkeypatch.setattr(Path, "write_text", read_only(write_text))
    monkeypatch.setattr(Path, "unlink", read_only(unlink))
    result = invoke("report", "exp", "--registry", url, "-o", "ro/out.html")
    assert_clean_failure(result, 2, "ro/out.html: Read-only file system")
    assert ".tmp" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_run_with_a_registry_that_cannot_be_opened(in_tmp: Path) -> None:
    """Was exit 1 (a failed run) for what is bad input: docs/cli.md says exit 2."""
    # SQLite cannot open a folder as a database, as it cannot create one in a read-only
    # folder: the same "unable to open database file".
    (in_tmp / "folder.db").mkdir()
    experiment = EXPERIMENTS / "quickstart.yaml"
    result = invoke(
        "run", experiment, "--registry", f"sqlite:///{in_tmp / 'folder.db'}", "--no-progress"
    )
    assert_clean_failure(result, 2, "cannot open the registry at", "folder.db")
    assert len(result.stderr.strip().splitlines()) == 1


# -- names users expect, deleting ----------------------------------------------------------------


def _one_experiment(
    folder: Path, name: str = "exp", scoring: str = "'accuracy'", refit: str = "True"
) -> str:
    """A registry with one finished experiment of three trials (no cluster needed)."""
    from dmlsearch.testing.registry_contract import make_trial

    url = f"sqlite:///{folder / 'reg.db'}"
    with Registry(url) as registry:
        exp = registry.store.create_experiment(
            name, config={"scoring": scoring, "refit": refit, "seed": 0}
        )
        registry.store.record_trials(
            exp.id,
            [make_trial(exp.id, n, value=0.5 + n / 10, params={"C": n}) for n in range(3)],
        )
        registry.store.set_experiment_status(exp.id, "complete")
    return url


@pytest.mark.parametrize(
    ("scoring", "refit", "metric"),
    [
        ("'accuracy'", "True", "accuracy"),
        ("None", "True", "score"),
        ("['roc_auc', 'accuracy']", "'accuracy'", "accuracy"),
        ("{'auc': make_scorer(roc_auc_score)}", "'auc'", "score"),
    ],
)
def test_show_names_the_metric(in_tmp: Path, scoring: str, refit: str, metric: str) -> None:
    url = _one_experiment(in_tmp, scoring=scoring, refit=refit)
    shown = ok_json("show", "exp", "--registry", url)
    assert shown["metric"] == metric
    assert [row["value"] for row in shown["leaderboard"]] == pytest.approx([0.7, 0.6, 0.5])
    human = invoke("show", "exp", "--registry", url)
    assert human.exit_code == 0
    header = next(line for line in human.stdout.splitlines() if "number" in line)
    assert f"mean_test_{metric}" in header and "value" not in header
    assert f"by mean {metric}" in human.stdout


def _with_model(url: str, name: str = "digits", versions: int = 2) -> None:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression().fit([[0.0], [1.0]], [0, 1])
    with Registry(url) as registry:
        for _ in range(versions):
            registry.register_model(name, model)


def test_tags_of_versions_are_set_shown_found_and_removed(in_tmp: Path) -> None:
    url = f"sqlite:///{in_tmp / 'reg.db'}"
    _with_model(url)
    result = invoke("registry", "tag", "set", "digits", "2", "stage", "prod", "--registry", url)
    assert result.exit_code == 0 and "digits version 2: stage=prod" in result.stdout
    versions = ok_json("registry", "versions", "digits", "--registry", url)
    assert [v["tags"] for v in versions] == [{}, {"stage": "prod"}]
    assert "stage=prod" in invoke("registry", "versions", "digits", "--registry", url).stdout
    with Registry(url) as registry:
        registry.set_tag("digits", 1, "owner", 7)  # values are text, as MLflow's
        assert [v.version for v in registry.search_models(tag=("stage", "prod"))] == [2]
        assert registry.versions("digits")[0].tags == {"owner": "7"}
        registry.delete_tag("digits", 1, "owner")
        assert registry.versions("digits")[0].tags == {}
        with pytest.raises(NotFoundError, match="did you mean 'digits'"):
            registry.set_tag("digit", 1, "stage", "x")
    for command, word in (
        (["registry", "tag", "delete", "digits", "1", "stage"], "stage"),
        (["registry", "tag", "set", "digits", "9", "stage", "x"], "9"),
        (["registry", "tag", "set", "digit", "1", "stage", "x"], "did you mean 'digits'"),
    ):
        assert_clean_failure(invoke(*command, "--registry", url), 2, word)
    result = invoke("registry", "tag", "delete", "digits", "2", "stage", "--registry", url)
    assert result.exit_code == 0 and "removed tag stage of digits version 2" in result.stdout


def test_delete_asks_first(in_tmp: Path) -> None:
    url = _one_experiment(in_tmp)
    refused = CliRunner().invoke(app, ["delete", "exp", "--registry", url], input="n\n")
    assert refused.exit_code == 1 and "nothing deleted" in refused.stderr
    assert "Delete experiment 'exp' (id 1, complete, 3 trial(s))" in refused.stdout
    no_terminal = CliRunner().invoke(app, ["delete", "exp", "--registry", url], input="")
    assert no_terminal.exit_code == 1 and "pass --yes" in no_terminal.stderr
    assert [e["name"] for e in ok_json("list", "--registry", url)] == ["exp"]
    assert_clean_failure(
        invoke("delete", "exq", "--yes", "--registry", url), 2, "did you mean 'exp'"
    )
    agreed = CliRunner().invoke(app, ["delete", "exp", "--registry", url], input="y\n")
    assert agreed.exit_code == 0, agreed.output
    assert "deleted experiment 'exp' (3 trials" in agreed.stdout
    assert ok_json("list", "--registry", url) == []


def test_delete_with_yes_by_id(in_tmp: Path) -> None:
    url = _one_experiment(in_tmp)
    result = invoke("delete", "1", "--yes", "--registry", url)
    assert result.exit_code == 0 and "deleted experiment 'exp'" in result.stdout
    assert ok_json("list", "--registry", url) == []
    assert_clean_failure(invoke("delete", "exp", "-y", "--registry", url), 2, "no experiment 'exp'")


def test_model_names_suggest_and_aliases_and_versions_delete(in_tmp: Path) -> None:
    url = f"sqlite:///{in_tmp / 'reg.db'}"
    _with_model(url)
    for command in (
        ["registry", "versions", "digit"],
        ["registry", "alias", "set", "digit", "champion", "1"],
        ["registry", "alias", "delete", "digit", "champion"],
        ["registry", "delete-version", "digit", "1", "--yes"],
    ):
        assert_clean_failure(invoke(*command, "--registry", url), 2, "did you mean 'digits'")
    assert (
        invoke("registry", "alias", "set", "digits", "champion", "2", "--registry", url).exit_code
        == 0
    )
    models = ok_json("registry", "models", "--registry", url)
    assert models == [{"model": "digits", "versions": 2, "latest": 2, "aliases": {"champion": 2}}]
    human = invoke("registry", "models", "--registry", url)
    assert "champion->v2" in human.stdout
    assert_clean_failure(
        invoke("registry", "alias", "delete", "digits", "nope", "--registry", url), 2, "nope"
    )
    result = invoke("registry", "alias", "delete", "digits", "champion", "--registry", url)
    assert result.exit_code == 0 and "removed digits@champion" in result.stdout
    assert ok_json("registry", "models", "--registry", url)[0]["aliases"] == {}

    refused = CliRunner().invoke(
        app, ["registry", "delete-version", "digits", "1", "--registry", url], input="n\n"
    )
    assert (
        refused.exit_code == 1
        and len(ok_json("registry", "versions", "digits", "--registry", url)) == 2
    )
    assert_clean_failure(
        invoke("registry", "delete-version", "digits", "7", "--yes", "--registry", url), 2, "7"
    )
    result = invoke("registry", "delete-version", "digits", "1", "--yes", "--registry", url)
    assert result.exit_code == 0 and "deleted digits version 1" in result.stdout
    assert [v["version"] for v in ok_json("registry", "versions", "digits", "--registry", url)] == [
        2
    ]


def test_delete_version_refuses_an_ensemble_member_without_force(in_tmp: Path) -> None:
    from sklearn.linear_model import Ridge

    from dmlsearch.ensemble import WeightedEnsemble, register_ensemble

    url = f"sqlite:///{in_tmp / 'reg.db'}"
    X, y = [[0.0], [1.0], [2.0]], [0.0, 1.0, 2.0]
    with Registry(url) as registry:
        members = [Ridge(alpha=a).fit(X, y) for a in (0.1, 1.0)]
        versions = [registry.register_model("r", m).version for m in members]
        ensemble = WeightedEnsemble(members, [1, 1]).fit()
        ensemble.member_versions_ = [("r", v) for v in versions]
        ensemble.members_ = [None, None]
        register_ensemble(registry, "ens", ensemble)
    assert_clean_failure(
        invoke("registry", "delete-version", "r", "1", "--yes", "--registry", url), 2, "ens:1"
    )
    assert len(ok_json("registry", "versions", "r", "--registry", url)) == 2
    result = invoke("registry", "delete-version", "r", "1", "--yes", "--force", "--registry", url)
    assert result.exit_code == 0 and "deleted r version 1" in result.stdout


def test_gc_dry_run_lists_and_keeps(in_tmp: Path) -> None:
    url = f"sqlite:///{in_tmp / 'reg.db'}"
    from sklearn.linear_model import LogisticRegression

    with Registry(url) as registry:
        registry.register_model("a", LogisticRegression().fit([[0.0], [1.0]], [0, 1]))
        registry.register_model("a", LogisticRegression(C=2).fit([[0.0], [1.0]], [0, 1]))
        orphan = registry.versions("a")[0].sha256
        registry.delete_version("a", 1)
    # A blob younger than the grace period could belong to a registration in flight.
    assert ok_json("registry", "gc", "--dry-run", "--registry", url)["removed"] == []
    dry = ok_json("registry", "gc", "--dry-run", "--grace", "0", "--registry", url)
    assert dry["dry_run"] is True and len(dry["removed"]) == 1
    path = dry["removed"][0]
    assert path.endswith(orphan) and Path(path).is_file()
    human = invoke("registry", "gc", "--dry-run", "--grace", "0", "--registry", url)
    assert human.stdout.split() == [path] and "nothing deleted" in human.stderr
    assert Path(path).is_file()
    assert ok_json("registry", "gc", "--grace", "0", "--registry", url)["removed"] == [path]
    assert not Path(path).exists()
    assert (
        ok_json("registry", "gc", "--dry-run", "--grace", "0", "--registry", url)["removed"] == []
    )
    with Registry(url) as registry:
        assert registry.verify() == {("a", 2): True}


def test_run_overwrite_replaces_only_when_it_can_run(in_tmp: Path, client: Client) -> None:
    quickstart = EXPERIMENTS / "quickstart.yaml"
    on_cluster = ["--set", f"cluster.address={client.scheduler.address}"]
    first = ok_json("run", quickstart, *SMALL, *on_cluster)
    assert first["n_trials"] == 3
    refused = invoke("run", quickstart, *SMALL, *on_cluster)
    assert_clean_failure(refused, 2, "already exists", "dmlsearch run --overwrite")
    # A run that cannot start (no scheduler there) leaves the old experiment as it was.
    unreachable = ["--set", "cluster={address: 'tcp://127.0.0.1:9', connect_timeout: 1}"]
    failed = invoke("run", quickstart, *SMALL, *unreachable, "--overwrite")
    assert_clean_failure(failed, 2, "cannot reach a Dask scheduler")
    assert [(e["id"], e["trials"]) for e in ok_json("list")] == [(first["experiment_id"], 3)]
    assert_clean_failure(
        invoke("resume", quickstart, *SMALL, "--overwrite"), 2, "No such option: --overwrite"
    )

    result = invoke(
        "run",
        quickstart,
        *SMALL,
        *on_cluster,
        "--set",
        "search.n_trials=2",
        "--overwrite",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert "deleted the previous experiment 'quickstart-digits' (3 trials" in result.stderr
    second = json.loads(result.stdout)
    assert second["n_trials"] == 2 and second["experiment_id"] != first["experiment_id"]
    listed = ok_json("list")
    assert [(e["id"], e["name"], e["trials"]) for e in listed] == [
        (second["experiment_id"], "quickstart-digits", 2)
    ]


def test_the_run_summary_counts_budget_stops_apart_from_failures() -> None:
    from types import SimpleNamespace

    from dmlsearch.cli._run import _result

    states = ["complete", "failed", "timeout", "stopped", "complete"]
    search = SimpleNamespace(
        trials_=[SimpleNamespace(number=i, state=s) for i, s in enumerate(states)],
        scoring="accuracy",
        refit=True,
        experiment_name="e",
    )
    out = _result(search, 1.0)
    assert out["n_trials"] == 5 and out["failed"] == 2 and out["stopped"] == 1


def test_a_run_where_no_trial_completed_is_an_error(in_tmp: Path, client: Client) -> None:
    # KFold(2) without shuffling: the second fold trains on the first 10 rows, one class,
    # so every trial fails there and scores its other fold (the search does not raise).
    rows = [f"{i},a" for i in range(10)] + [f"{i},{'ab'[i % 2]}" for i in range(10, 20)]
    (in_tmp / "data.csv").write_text("x,label\n" + "\n".join(rows) + "\n")
    (in_tmp / "exp.yaml").write_text(
        "version: 1\nname: one-class-fold\n"
        "data: {path: data.csv, target: label}\n"
        "model: sklearn.linear_model.LogisticRegression\n"
        "search:\n  space: {C: [1.0, 2.0]}\n  strategy: grid\n"
        "  cv: {class: sklearn.model_selection.KFold, params: {n_splits: 2}}\n"
    )
    address = client.scheduler.address
    args = ["exp.yaml", "--no-progress", "--set", f"cluster.address={address}"]
    result = invoke("run", *args)
    assert_clean_failure(
        result, 1, "error: no trial completed: 2 of 2 trials failed", "only one class"
    )
    assert "best " not in result.stdout
    # --json still prints the summary, for scripts, and exits 1 too.
    result = invoke("run", *args, "--overwrite", "--json")
    assert result.exit_code == 1 and "no trial completed" in result.stderr
    assert json.loads(result.stdout)["failed"] == 2


def test_run_json_prints_its_summary_when_every_fold_of_every_trial_failed(
    in_tmp: Path, client: Client
) -> None:
    # The search raises (AllTrialsFailedError): there was no fitted search to summarise,
    # and --json printed nothing on stdout; scripts now get the recorded trials.
    (in_tmp / "exp.yaml").write_text(
        "version: 1\nname: all-fail\ndata: {dataset: 'sklearn:load_iris'}\n"
        "model: {class: sklearn.linear_model.LogisticRegression,"
        " params: {solver: newton-cg, penalty: l1}}\n"
        "search:\n  space: {C: [1.0, 2.0]}\n  strategy: grid\n  cv: 2\n"
    )
    address = client.scheduler.address
    result = invoke(
        "run", "exp.yaml", "--no-progress", "--set", f"cluster.address={address}", "--json"
    )
    assert result.exit_code == 1 and "all 2 trials failed" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["experiment"] == "all-fail" and summary["experiment_id"] is not None
    assert (summary["n_trials"], summary["failed"], summary["model"]) == (2, 2, None)
    assert summary["best_score"] is None and "supports only 'l2'" in summary["error"]


# -- passwords ------------------------------------------------------------------------------------


def test_a_registry_password_is_never_shown(in_tmp: Path) -> None:
    """Probe p19: table titles, "no experiment/model ... in <url>", run's "already exists
    in <url>", the delete questions and validate --json printed the password, which the
    Python API hides as ***."""
    import sqlalchemy as sa

    from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema
    from dmlsearch.training._record import JobRecord
    from dmlsearch.training._resume import check_resumable

    password = "S3cretPW"
    with postgres_schema(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)) as scoped:
        url = sa.make_url(scoped).set(password=password).render_as_string(hide_password=False)
        masked = sa.make_url(url).render_as_string(hide_password=True)
        assert password in url and password not in masked
        Registry(url, str(in_tmp / "store")).close()
        outputs = [
            invoke("list", "--registry", url),
            invoke("registry", "models", "--registry", url),
        ]
        _with_model(url, "m", versions=1)
        with Registry(url) as registry:
            exp = registry.store.create_experiment("exp")
            registry.store.set_experiment_status(exp.id, "complete")
            for call in (
                lambda: check_resumable(registry, "nope"),
                lambda: JobRecord.open(registry, "exp", {}, "fingerprint", {}),
            ):
                with pytest.raises(InvalidParameterError) as info:
                    call()
                assert masked in str(info.value) and password not in str(info.value)
        (in_tmp / "exp.yaml").write_text(
            (EXPERIMENTS / "quickstart.yaml").read_text(encoding="utf-8")
            + f"\nregistry:\n  url: {url}\n  artifacts: {in_tmp / 'store'}\n",
            encoding="utf-8",
        )
        outputs += [
            invoke("list", "--registry", url),
            invoke("registry", "models", "--registry", url),
            invoke("show", "nope", "--registry", url),
            invoke("registry", "versions", "nope", "--registry", url),
            invoke("delete", "exp", "--registry", url),
            invoke("registry", "delete-version", "m", "1", "--registry", url),
            invoke("run", "exp.yaml", "--set", "name=exp", "--no-progress"),
            invoke("validate", "exp.yaml", "--json"),
        ]
    for result in outputs:
        assert password not in result.output, result.output
    for result in outputs:  # table titles wrap: look for the user and the mask
        assert f"{sa.make_url(url).username}:***@" in result.output, result.output
    assert json.loads(outputs[-1].stdout)["registry"] == masked
