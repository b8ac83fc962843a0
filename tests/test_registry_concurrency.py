"""Many processes writing one registry at once: no lost trial, no lock error, no duplicate version.

Workers are started with 'spawn' (as Dask's nannies and other hosts are: nothing inherited)
and count the errors they meet instead of dying, so that the test reports them all. The
eight processes are started once per module and reused by both backends, because each
spawned interpreter spends seconds importing dmlsearch (scikit-learn, Dask) before it can
write; the workers wait at a barrier so that their writes overlap.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

# dmlsearch is imported inside functions: spawned workers import this module too.

N_PROCS = 8
TRIALS_PER_PROC = 500
VERSIONS_PER_PROC = 20
MODEL = "shared-model"
# Numbers every process writes too, so that concurrent upserts hit the same rows.
HOT = range(N_PROCS * TRIALS_PER_PROC, N_PROCS * TRIALS_PER_PROC + 10)


def _plan(index: int) -> tuple[list[list[int]], list[int]]:
    """This worker's trial numbers in random batches of 1..50, and after which batches it
    registers a model version (20 in all)."""
    rng = random.Random(index)
    numbers = list(range(index * TRIALS_PER_PROC, (index + 1) * TRIALS_PER_PROC))
    batches: list[list[int]] = []
    while numbers:
        size = rng.randint(1, 50)
        batches.append(numbers[:size])
        numbers = numbers[size:]
    batches[rng.randrange(len(batches))].extend(HOT)
    version_after = [rng.randrange(len(batches)) for _ in range(VERSIONS_PER_PROC)]
    return batches, version_after


def _write(url: str, experiment_id: int, index: int, barrier: Any) -> dict[str, Any]:
    """One job: open the store, then write this worker's share, counting every error."""
    from dmlsearch.registry import RegistryUnavailableError, SQLStore, TrialRecord

    report: dict[str, Any] = {"index": index, "locked": 0, "errors": [], "versions": []}

    def attempt(write: Callable[[], Any]) -> Any:
        try:
            return write()
        except RegistryUnavailableError as exc:
            if "database is locked" in str(exc):
                report["locked"] += 1
            else:
                report["errors"].append(repr(exc))
        except Exception as exc:
            report["errors"].append(repr(exc))
        return None

    batches, version_after = _plan(index)
    try:
        store = SQLStore(url)  # migrate() on an existing database, 8 processes at once
        barrier.wait(timeout=120)
        start = time.perf_counter()
        for b, batch in enumerate(batches):
            trials = [
                TrialRecord(experiment_id, n, "complete", {"n": n}, {}, value=n / 1e4)
                for n in batch
            ]
            attempt(partial(store.record_trials, experiment_id, trials))
            for _ in range(version_after.count(b)):
                version = attempt(
                    partial(
                        store.create_model_version,
                        MODEL,
                        artifact_uri=f"memory://{index}",
                        sha256=f"{index:064x}",
                        format="skops",
                        metrics={"accuracy": index / 10},
                    )
                )
                if version is not None:
                    report["versions"].append(version.version)
        report["seconds"] = time.perf_counter() - start
        store.close()
    except Exception as exc:
        report["errors"].append(repr(exc))
    return report


def _serve(index: int, jobs: Any, results: Any, barrier: Any) -> None:
    """A spawned worker: import once, then run jobs ``(url, experiment_id)`` until None."""
    import dmlsearch.registry  # noqa: F401  (the slow part, done before the first job)

    results.put({"ready": index})
    while (job := jobs.get()) is not None:
        url, experiment_id = job
        results.put(_write(url, experiment_id, index, barrier))


@dataclass
class Writers:
    jobs: list[Any]
    results: Any


@pytest.fixture(scope="module")
def writers() -> Iterator[Writers]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(N_PROCS)
    results = ctx.Queue()
    jobs = [ctx.Queue() for _ in range(N_PROCS)]
    procs = [
        ctx.Process(target=_serve, args=(i, jobs[i], results, barrier), daemon=True)
        for i in range(N_PROCS)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            results.get(timeout=300)
        yield Writers(jobs, results)
    finally:
        for q in jobs:
            q.put(None)
        # Idle workers hold nothing: give them a moment to exit, then stop the stragglers
        # (interpreter shutdown with Dask loaded takes seconds on a busy machine).
        deadline = time.monotonic() + 5
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema

    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'dmlsearch.db'}"
    else:
        with postgres_schema(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)) as scoped:
            yield scoped


def test_concurrent_writers(writers: Writers, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from dmlsearch.registry import SQLStore

    with SQLStore(url) as store:
        experiment_id = store.create_experiment("concurrent").id

    start = time.perf_counter()
    for q in writers.jobs:
        q.put((url, experiment_id))
    reports = []
    try:
        for _ in writers.jobs:
            reports.append(writers.results.get(timeout=120))
    except queue.Empty:
        pytest.fail(f"only {len(reports)} of {N_PROCS} workers reported back")
    elapsed = time.perf_counter() - start

    locked = sum(r["locked"] for r in reports)
    errors = [e for r in reports for e in r["errors"]]
    versions = [v for r in reports for v in r["versions"]]
    with capsys.disabled():
        writing = max(r.get("seconds", 0.0) for r in reports)
        print(
            f"\n[{url.split(':')[0]}] {N_PROCS} processes: {elapsed:.1f} s for the job, "
            f"{writing:.1f} s writing; locked={locked}, errors={len(errors)}"
        )
    assert errors == []
    assert locked == 0
    assert sorted(versions) == list(range(1, N_PROCS * VERSIONS_PER_PROC + 1))

    expected = set(range(N_PROCS * TRIALS_PER_PROC)) | set(HOT)
    with SQLStore(url) as store:
        trials = store.get_trials(experiment_id)
        assert store.count_trials(experiment_id) == len(expected)
        assert [t.number for t in trials] == sorted(expected)
        assert all(t.value == t.number / 1e4 and t.params == {"n": t.number} for t in trials)
        stored = [v.version for v in store.list_model_versions(MODEL)]
        assert stored == list(range(1, N_PROCS * VERSIONS_PER_PROC + 1))
