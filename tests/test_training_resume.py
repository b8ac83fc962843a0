"""Resuming a training job of an experiment file from its last recorded checkpoint.

``dmlsearch resume FILE`` after the driver was SIGKILLed (with the cluster it started) or
after the job failed: the job continues from the checkpoint its experiment records, trains
only the remaining epochs, and its checkpoint survives ``registry gc`` until it finishes.
The kill is not timing-lucky: the ranks' loss (``gated_*.py``, written beside the file)
blocks at the first step after epoch ``AFTER`` until a gate file exists, so the job always
stops right after that epoch's checkpoint; every step of a rank is logged (its pid), which
counts the epochs each run trained.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from typer.testing import CliRunner

from dmlsearch import Registry
from dmlsearch.cli import app

EPOCHS = 5
AFTER = 2  # the epoch whose checkpoint the first run stops after
RANKS = 2
STEPS = (256 // RANKS) // 32  # rows per rank // batch size: steps per epoch of a rank

GATED = '''
"""A model and a loss for the resume tests: the loss logs every step of a rank and stops
the job after ``after`` epochs until ``gate`` exists (``stop``: block, or raise)."""

import os
import time
from pathlib import Path

import torch


def mlp(n_features=8, hidden=16, n_classes=2):
    return torch.nn.Sequential(
        torch.nn.Linear(n_features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, n_classes)
    )


def gated_loss(output, target, log, gate, after, stop="block"):
    import torch.distributed as dist

    if dist.is_initialized():  # a rank's step, not the driver's check of the file
        pid, path = str(os.getpid()), Path(log)
        done = path.read_text().split().count(pid) if path.exists() else 0
        while done >= after and not Path(gate).exists():
            if stop == "raise":
                raise RuntimeError("stopped at the gate")
            time.sleep(0.05)
        with path.open("a") as f:
            f.write(pid + "\\n")
    return torch.nn.functional.cross_entropy(output, target)
'''


def _experiment(
    folder: Path, name: str, stop: str, after: int = AFTER, cluster: str = "", module: str = ""
) -> Path:
    """Write the gated module and experiment ``name`` in ``folder``; returns the file.

    ``module``: the module's name (``gated_<module>``): in-process runs import it once,
    so each test names its own.
    """
    module = f"gated_{module or name}"
    (folder / f"{module}.py").write_text(GATED, encoding="utf-8")
    file = folder / f"{name}.yaml"
    file.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: {name}
            data:
              dataset: sklearn:make_classification
              kwargs: {{n_samples: 256, n_features: 8, n_informative: 4, random_state: 0}}
            train:
              model: {{function: {module}:mlp, kwargs: {{hidden: 16}}}}
              loss:
                function: {module}:gated_loss
                kwargs: {{log: {folder / (name + ".log")}, gate: {folder / "gate"},
                          after: {after * STEPS}, stop: {stop}}}
              optimizer: {{class: SGD, lr: 0.1, momentum: 0.9}}
              epochs: {EPOCHS}
              batch_size: 32
              n_workers: {RANKS}
              random_state: 0
            """
        )
        + cluster,
        encoding="utf-8",
    )
    return file


def _steps(folder: Path, name: str) -> list[str]:
    """The pids of every rank step logged so far, one per step."""
    log = folder / f"{name}.log"
    return log.read_text(encoding="utf-8").split() if log.exists() else []


def _config(url: str, name: str) -> dict[str, Any]:
    with Registry(url, create=False) as registry:
        return dict(registry.experiment(name).config)


def _cli(url: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmlsearch", *map(str, args), "--registry", url],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _invoke(url: str, *args: str | Path) -> Any:
    result = CliRunner().invoke(app, [*map(str, args), "--registry", url])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _kill_after_checkpoint(
    file: Path, url: str, name: str, sig: int = signal.SIGKILL
) -> tuple[dict[str, Any], int, str]:
    """Run FILE with its own cluster; once the registry records the checkpoint of epoch
    AFTER, SIGKILL the driver and that cluster (or send ``sig`` to the driver alone).
    Returns that checkpoint's record, the driver's exit code and its stderr."""
    # Files, not pipes: nobody reads a pipe while the driver runs, and the driver's and its
    # workers' logs (they share its stderr) would block on a full pipe.
    out, err = file.with_suffix(".out"), file.with_suffix(".err")
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dmlsearch",
                "run",
                str(file),
                "--no-progress",
                "--registry",
                url,
            ],
            stdout=stdout,
            stderr=stderr,
            text=True,
            start_new_session=True,  # its process group: the driver and the workers it started
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            # A test run started in the background (`cmd &`, nohup) ignores SIGINT, and a
            # child inherits that: Python then installs no KeyboardInterrupt handler.
            preexec_fn=_default_sigint,
        )
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the driver ended before it was killed: {err.read_text()}")
            assert time.monotonic() < deadline, "no checkpoint of epoch AFTER was recorded"
            try:
                checkpoint = _config(url, name).get("checkpoint")
            except Exception:  # the registry or the experiment is not created yet
                checkpoint = None
            if checkpoint and checkpoint["epoch"] == AFTER:
                break
            time.sleep(0.1)
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(sig)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)  # faulthandler writes every thread's stack
            proc.wait(timeout=30)
            pytest.fail(f"the driver did not end 120 s after {sig!r}: {err.read_text()[-8000:]}")
        return dict(checkpoint), code, err.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_killed_driver_resumes_from_its_last_checkpoint_which_gc_keeps(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    cluster = "cluster:\n  local: {n_workers: 2, threads_per_worker: 1}\n"
    file = _experiment(tmp_path, "killed", "block", cluster=cluster)
    checkpoint, code, _ = _kill_after_checkpoint(file, url, "killed")
    assert code == -signal.SIGKILL

    # The ranks stopped at the gate right after epoch AFTER's checkpoint: AFTER epochs ran.
    before = _steps(tmp_path, "killed")
    assert len(before) == AFTER * STEPS * RANKS
    assert [e["epoch"] for e in checkpoint["history"]] == list(range(1, AFTER + 1))
    shown = json.loads(_invoke(url, "show", "killed", "--json").stdout)
    assert shown["status"] == "running"  # nothing could record the end
    assert shown["checkpoint"] == {"epoch": AFTER, "sha256": checkpoint["sha256"]}

    # gc keeps the recorded checkpoint (an earlier one the driver stored, nothing references).
    gc = _invoke(url, "registry", "gc", "--grace", "0", "--json")
    assert gc.exit_code == 0, gc.output
    assert not any(checkpoint["sha256"] in p for p in json.loads(gc.stdout)["removed"])
    with Registry(url, create=False) as registry:
        assert registry.artifacts.problem(checkpoint["sha256"]) is None

    (tmp_path / "gate").touch()
    resumed = _cli(url, "resume", file, "--no-progress", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumes from its checkpoint of epoch {AFTER}" in resumed.stderr
    out = json.loads(resumed.stdout)
    assert [e["epoch"] for e in out["epochs"]] == list(range(1, EPOCHS + 1))
    assert out["resumed"] == {"epoch": AFTER, "checkpoint": checkpoint["sha256"]}
    assert out["model"] == {"name": "killed", "version": 1}

    # Only the remaining epochs were trained, by new ranks; the first ones came from the
    # checkpoint's recorded figures.
    after = _steps(tmp_path, "killed")[len(before) :]
    assert len(after) == (EPOCHS - AFTER) * STEPS * RANKS
    assert not set(after) & set(before)
    with Registry(url, create=False) as registry:
        version = registry.model_version("killed")
        experiment = registry.experiment("killed")
        assert version.lineage["history"][:AFTER] == checkpoint["history"]
        assert [e["epoch"] for e in version.lineage["history"]] == list(range(1, EPOCHS + 1))
        assert version.lineage["resumed"] == [
            {"epoch": AFTER, "checkpoint": checkpoint["sha256"], "n_workers": RANKS}
        ]
        assert experiment.status == "complete" and "checkpoint" not in experiment.config
        assert [r["epoch"] for r in experiment.config["resumes"]] == [AFTER]
    human = _invoke(url, "show", "killed").stdout
    assert f"resumed from the checkpoint of epoch {AFTER} ({checkpoint['sha256'][:12]})" in human
    verify = _invoke(url, "registry", "verify")
    assert verify.exit_code == 0 and "1 of 1 versions verified" in verify.stdout

    # Finished, its checkpoint is no longer kept.
    assert _invoke(url, "registry", "gc", "--grace", "0").exit_code == 0
    with Registry(url, create=False) as registry:
        assert registry.artifacts.problem(checkpoint["sha256"]) is not None


@pytest.mark.parametrize(("sig", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_job_is_recorded_so_and_resumes(
    tmp_path: Path, sig: int, exit_code: int
) -> None:
    # SIGTERM is what a batch scheduler's walltime, scancel, kill and docker stop send: it
    # left the job 'running' for ever, as if its driver had been SIGKILLed.
    url = f"sqlite:///{tmp_path / 'r.db'}"
    cluster = "cluster:\n  local: {n_workers: 2, threads_per_worker: 1}\n"
    file = _experiment(tmp_path, "stopped", "block", cluster=cluster)
    checkpoint, code, stderr = _kill_after_checkpoint(file, url, "stopped", sig)
    assert code == exit_code, stderr
    # The file it ran, not a placeholder (a probe asked which file "FILE" was).
    assert f"`dmlsearch resume {shlex.quote(str(file))}` continues it from its last" in stderr
    shown = json.loads(_invoke(url, "show", "stopped", "--json").stdout)
    assert shown["status"] == "interrupted"
    assert shown["checkpoint"] == {"epoch": AFTER, "sha256": checkpoint["sha256"]}

    (tmp_path / "gate").touch()
    resumed = _cli(url, "resume", file, "--no-progress", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert [e["epoch"] for e in json.loads(resumed.stdout)["epochs"]] == list(range(1, EPOCHS + 1))
    assert len(_steps(tmp_path, "stopped")) == EPOCHS * STEPS * RANKS  # each epoch once
    shown = json.loads(_invoke(url, "show", "stopped", "--json").stdout)
    assert shown["status"] == "complete" and shown["checkpoint"] is None


def test_a_failed_job_resumes_unless_its_settings_changed(tmp_path: Path, client: Client) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    address = ["--set", f"cluster.address={client.scheduler.address}", "--no-progress"]
    file = _experiment(tmp_path, "failing", "raise")
    failed = _invoke(url, "run", file, *address)
    assert failed.exit_code == 1, failed.output
    assert f"the last checkpoint is of epoch {AFTER}" in failed.stderr
    recorded = _config(url, "failing")
    assert recorded["checkpoint"]["epoch"] == AFTER

    # A file changed since the job started is refused, naming what changed; the job keeps
    # its status and checkpoint.
    for change, named in [
        ("train.batch_size=16", "batch_size: 32 -> 16"),
        ("train.epochs=1", f"epochs lowered: {EPOCHS} -> 1"),
        ("train.model.kwargs.hidden=8", "the model's parameters (their names or shapes)"),
        ("train.optimizer.lr=0.5", "the optimizer"),
        ("train.sync=average", "sync: 'allreduce' -> 'average'"),
    ]:
        refused = _invoke(url, "resume", file, *address, "--set", change)
        assert refused.exit_code == 2, refused.output
        assert "cannot resume training job 'failing'" in refused.stderr and named in refused.stderr
        assert "Traceback" not in refused.output
    # More workers than the cluster has: refused once the job is reopened, and undone.
    too_many = _invoke(url, "resume", file, *address, "--set", "train.n_workers=5")
    assert too_many.exit_code == 2 and "n_workers" in too_many.stderr, too_many.output
    with Registry(url, create=False) as registry:
        experiment = registry.experiment("failing")
        assert experiment.status == "failed" and experiment.config == recorded

    assert recorded["driver"]["pid"] == os.getpid()  # the driver is recorded, as a search's

    # While a driver may still run it, a resume is refused (found by a probe: two drivers
    # trained the job and registered two versions); --force overrides.
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Registry(url, create=False) as registry:
            exp = registry.experiment("failing")
            driver = {**recorded["driver"], "pid": alive.pid}
            registry.store.set_experiment_config(exp.id, {**exp.config, "driver": driver})
            registry.store.set_experiment_status(exp.id, "running")
        refused = _invoke(url, "resume", file, *address)
        assert refused.exit_code == 2, refused.output
        assert f"process {alive.pid} on this host" in refused.stderr
        assert f"`dmlsearch resume {shlex.quote(str(file))} --force`" in refused.stderr
        (tmp_path / "gate").touch()
        resumed = _invoke(url, "resume", file, *address, "--force")
    finally:
        alive.kill()
        alive.wait()
    assert resumed.exit_code == 0, resumed.output
    assert f"resumed from the checkpoint of epoch {AFTER}" in resumed.stdout
    assert f"epochs {AFTER + 1}..{EPOCHS} trained now" in resumed.stdout
    # Not "trained 6 epochs" when the run trained only those after the checkpoint.
    assert f"{EPOCHS} epochs, {EPOCHS - AFTER} trained in this run, on" in resumed.stdout
    shown = json.loads(_invoke(url, "show", "failing", "--json").stdout)
    assert shown["status"] == "complete" and shown["checkpoint"] is None
    assert [r["epoch"] for r in shown["resumes"]] == [AFTER]
    assert len(_steps(tmp_path, "failing")) == EPOCHS * STEPS * RANKS  # each epoch once
    page = tmp_path / "failing.html"
    assert _invoke(url, "report", "failing", "-o", page).exit_code == 0
    sha = shown["resumes"][0]["checkpoint"]
    text = page.read_text(encoding="utf-8")
    assert f"after epoch {AFTER}: resumed from checkpoint {sha[:12]} on {RANKS} worker(s)" in text

    # A finished job: nothing to resume, and no error; more epochs asked for are named.
    again = _invoke(url, "resume", file, *address)
    assert again.exit_code == 0, again.output
    assert "training job 'failing' is already complete" in again.stderr
    more = _invoke(url, "resume", file, *address, "--set", f"train.epochs={EPOCHS + 2}")
    assert more.exit_code == 0, more.output
    assert f"{EPOCHS + 2} epochs are asked for now, but a finished job does not train on" in (
        more.stderr
    )


def test_a_job_with_no_checkpoint_resumes_from_epoch_0_and_a_deleted_one_is_collected(
    tmp_path: Path, client: Client
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    address = ["--set", f"cluster.address={client.scheduler.address}", "--no-progress"]
    first = _experiment(tmp_path, "early", "raise", after=0)
    assert _invoke(url, "run", first, *address).exit_code == 1  # fails in epoch 1
    assert "checkpoint" not in _config(url, "early")
    (tmp_path / "gate").touch()
    resumed = _invoke(url, "resume", first, *address)
    assert resumed.exit_code == 0, resumed.output
    assert "resumed with no checkpoint recorded, from epoch 0" in resumed.stdout
    assert f"epochs 1..{EPOCHS} trained now" in resumed.stdout

    # A failed job that is deleted (or overwritten) leaves its checkpoint to gc.
    (tmp_path / "gate").unlink()
    second = _experiment(tmp_path, "dropped", "raise", module="early")
    assert _invoke(url, "run", second, *address).exit_code == 1
    sha = _config(url, "dropped")["checkpoint"]["sha256"]
    assert _invoke(url, "delete", "dropped", "--yes").exit_code == 0
    assert _invoke(url, "registry", "gc", "--grace", "0").exit_code == 0
    with Registry(url, create=False) as registry:
        assert registry.artifacts.problem(sha) is not None


def test_resume_needs_the_registry_and_the_experiment_name() -> None:
    import numpy as np
    import torch

    from dmlsearch.exceptions import InvalidParameterError
    from dmlsearch.training import DataParallelTrainer

    X, y = np.zeros((64, 4), dtype=np.float32), np.zeros(64, dtype=np.int64)
    trainer = DataParallelTrainer(
        lambda: torch.nn.Linear(4, 2),
        torch.nn.functional.cross_entropy,
        lambda params: torch.optim.SGD(params, lr=0.1),
        resume=True,
        experiment_name="job",
    )
    with pytest.raises(InvalidParameterError, match="resume=True needs the registry"):
        trainer.fit(X, y)


def test_registry_verify_checks_an_unfinished_jobs_recorded_checkpoint(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Registry(url) as registry:
        _, sha = registry.artifacts.put(b"a checkpoint's bytes")
        registry.store.create_experiment("job", config={"checkpoint": {"epoch": 2, "sha256": sha}})
    ok = _invoke(url, "registry", "verify")
    assert ok.exit_code == 0, ok.output
    with Registry(url, create=False) as registry:  # the blob lost (a wiped disk, a bad sync)
        blob = next(b for b in registry.artifacts.blobs() if sha in b.path)
        registry.artifacts.fs.rm(blob.path)
    broken = _invoke(url, "registry", "verify")
    assert broken.exit_code == 1
    assert "checkpoint of job job" in broken.stderr and "epoch-2 checkpoint" in broken.stderr
    listed = json.loads(_invoke(url, "registry", "verify", "--json").stdout)
    assert listed == [
        {"experiment": "job", "checkpoint": True, "ok": False, "error": listed[0]["error"]}
    ]
