"""Real faults on real clusters: crashing trials, exposure of the embedded cluster, two
experiments at once (docs/reliability.md).

``experiments/reliability/crash_repeat.py`` runs the crash tests many times in a row
(``DMLSEARCH_CRASH_REPEATS``) and records the pass count.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import dask
import numpy as np
import psutil
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import make_classification
from sklearn.exceptions import FitFailedWarning

from dmlsearch import Registry, SearchCV
from dmlsearch.runner import start_local_cluster
from dmlsearch.testing import SleepyClassifier

pytestmark = pytest.mark.cluster

# The estimators below live in this test module: workers get them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: A worker's memory limit in the memory test: the nanny kills it at 95 % of this.
MEMORY_LIMIT = 600 * 2**20
REPEATS = int(os.environ.get("DMLSEARCH_CRASH_REPEATS", "1"))


class Crasher(SleepyClassifier):
    """Crashes its worker process in ``fit`` when ``crash`` is set, in one of three ways."""

    def __init__(self, crash: str = "", parameter: float = 0.0) -> None:
        super().__init__(seconds=0.05, parameter=parameter)
        self.crash = crash

    def fit(self, X: Any, y: Any) -> Crasher:
        if self.crash == "exit":
            os._exit(13)
        elif self.crash == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        elif self.crash == "memory":
            hog = []
            for _ in range(100):  # up to 5 GiB, 50 MiB at a time: the nanny stops it first
                hog.append(np.ones(50 * 2**20 // 8))
                time.sleep(0.005)
        super().fit(X, y)
        return self


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return make_classification(n_samples=60, n_features=4, random_state=0)


@pytest.fixture
def crash_cluster() -> Iterator[LocalCluster]:
    cl = start_local_cluster(2, memory_limit=MEMORY_LIMIT)
    yield cl
    cl.close()


def _grid_search(estimator: Any, space: Any, client: Client) -> SearchCV:
    return SearchCV(
        estimator,
        space,
        strategy="grid",
        cv=2,
        client=client,
        progress=False,
        refit=False,
        dashboard=False,
    )


@pytest.mark.filterwarnings("ignore:One or more of the test scores are non-finite")
@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize("mode", ["exit", "segfault", "memory"])
def test_trial_that_crashes_its_worker_is_the_only_one_failed(
    crash_cluster: LocalCluster, data: Any, mode: str, repeat: int
) -> None:
    X, y = data
    # The crashing trial sits among healthy ones, so their tasks run beside it.
    space = [
        {"crash": [""], "parameter": [0.0, 1.0, 2.0]},
        {"crash": [mode], "parameter": [3.0]},
        {"crash": [""], "parameter": [4.0, 5.0, 6.0]},
    ]
    with Client(crash_cluster, set_as_default=False) as client:
        search = _grid_search(Crasher(), space, client)
        with pytest.warns(FitFailedWarning, match="1 of the 7 trials failed"):
            search.fit(X, y)
    states = {t.params["parameter"]: t.state for t in search.trials_}
    assert sorted(t.number for t in search.trials_) == list(range(7))
    assert states.pop(3.0) == "failed"
    assert set(states.values()) == {"complete"}, search.trials_
    culprit = next(t for t in search.trials_ if t.params["parameter"] == 3.0)
    assert "killed every worker" in culprit.error or "crashes its worker" in culprit.error
    assert np.isnan(search.cv_results_["mean_test_score"][3])
    assert search.runner_stats_.recorded == 7


class LateCrasher(SleepyClassifier):
    """Sleeps ``seconds`` in ``fit``, then exits its worker process when ``crash`` is set."""

    def __init__(self, crash: bool = False, seconds: float = 0.0, parameter: float = 0.0) -> None:
        super().__init__(seconds=seconds, parameter=parameter)
        self.crash = crash

    def fit(self, X: Any, y: Any) -> LateCrasher:
        super().fit(X, y)
        if self.crash:
            os._exit(13)
        return self


@pytest.mark.filterwarnings("ignore:One or more of the test scores are non-finite")
def test_a_trial_running_beside_the_crasher_on_both_workers_it_killed_is_not_charged(
    data: Any,
) -> None:
    # Two workers with two threads: a healthy trial runs beside the crasher and dies with
    # it; Dask reruns both side by side on the other worker once its longer trials end,
    # and the crasher kills that worker too. Dask then gives both up with the
    # same KilledWorker ("2 different workers"), and the healthy trial was seen running on
    # each worker that died: only a solo run tells it from the culprit.
    X, y = data
    space = [
        {"crash": [True], "seconds": [0.3], "parameter": [0.0]},
        {"crash": [False], "seconds": [1.0], "parameter": [1.0, 2.0, 3.0]},
    ]
    # Without work stealing, the reruns stay on the surviving worker, side by side.
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        cluster = start_local_cluster(2, threads_per_worker=2)
    try:
        with Client(cluster, set_as_default=False) as client:
            search = _grid_search(LateCrasher(), space, client)
            with pytest.warns(FitFailedWarning, match="1 of the 4 trials failed"):
                search.fit(X, y)
    finally:
        cluster.close()
    states = {t.params["parameter"]: (t.state, t.error) for t in search.trials_}
    assert states.pop(0.0)[0] == "failed"
    assert set(states.values()) == {("complete", None)}, states
    culprit = next(t for t in search.trials_ if t.params["parameter"] == 0.0)
    assert "killed its worker when it ran alone" in (culprit.error or ""), culprit.error
    assert search.runner_stats_.probes >= 2


def _warm_modules() -> tuple[bool, list[str]]:
    """On a worker: whether the warm modules are imported, and its parent's command line."""
    from dmlsearch.runner.cluster import WARM_MODULES

    parent = psutil.Process(os.getppid()).cmdline()
    return all(m in sys.modules for m in WARM_MODULES), parent


def test_a_lost_worker_is_replaced_by_a_warm_one(fresh_cluster: LocalCluster) -> None:
    with Client(fresh_cluster, set_as_default=False) as client:
        pids = client.run(os.getpid)
        victim = sorted(pids)[0]
        os.kill(pids[victim], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            workers = set(client.nthreads())
            if len(workers) == 2 and victim not in workers:
                break
            time.sleep(0.05)
        new = (set(client.nthreads()) - set(pids)).pop()
        warm, parent = client.run(_warm_modules, workers=[new])[new]
    # Forked from the fork server, scikit-learn and dmlsearch already imported: nothing to
    # import before its first trial (a spawned worker imports them on its first task).
    assert warm
    assert any("forkserver" in part for part in parent), parent


def _server_settings(dask_worker: Any) -> tuple[float, bool]:
    return dask_worker._tick_interval, dask.config.get("distributed.worker.profile.enabled")


def test_the_embedded_cluster_keeps_its_servers_quiet(client: Client) -> None:
    # The workers forked from the warm server carry the settings made when the cluster
    # started: no profiler, an event-loop self-timing tick every 200 ms rather than 20 ms
    # (half an idle cluster's CPU, taken from the ranks of gang jobs).
    for tick, profiling in client.run(_server_settings).values():
        assert tick == pytest.approx(0.2)
        assert not profiling
    assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler._tick_interval) == (
        pytest.approx(0.2)
    )


def test_processes_false_keeps_thread_workers() -> None:
    # In-process comms take no host (127.0.0.1 is for TCP).
    cluster = start_local_cluster(1, processes=False, host=None, dashboard_address=":0")
    try:
        assert type(next(iter(cluster.workers.values()))).__name__ == "Worker"
    finally:
        cluster.close()


def _listening(root: psutil.Process) -> set[tuple[int, str, int]]:
    """(pid, ip, port) of every TCP socket listening in ``root`` and its descendants."""
    found = set()
    for proc in [root, *root.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:  # ended meanwhile
            continue
        for conn in conns:
            if conn.status == psutil.CONN_LISTEN:
                found.add((proc.pid, conn.laddr.ip, conn.laddr.port))
    return found


def test_embedded_cluster_listens_only_on_loopback(data: Any) -> None:
    X, y = data
    me = psutil.Process()
    # Only what this search's embedded cluster opens: other tests' clusters (the shared
    # one's workers, say) and sockets open before it are not its doing.
    earlier = {p.pid for p in me.children(recursive=True)}
    open_before = _listening(me)
    seen: set[tuple[int, str, int]] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.1):
            seen.update(s for s in _listening(me) if s[0] not in earlier and s not in open_before)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # client=None: the embedded default cluster (scheduler, nannies, workers, dashboard).
        search = SearchCV(
            SleepyClassifier(seconds=0.1),
            {"parameter": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]},
            strategy="grid",
            cv=2,
            progress=False,
            refit=False,
        )
        search.fit(X, y)
    finally:
        stop.set()
        watcher.join()
    worker_pids = {pid for pid, _, _ in seen if pid != me.pid}
    assert worker_pids, f"no worker process was seen listening: {seen}"
    ports_here = {port for pid, _, port in seen if pid == me.pid}
    assert len(ports_here) >= 3, "expected the scheduler, its dashboard and the nannies"
    exposed = sorted((pid, ip, port) for pid, ip, port in seen if ip != "127.0.0.1")
    assert not exposed, f"listening beyond 127.0.0.1: {exposed}"


@pytest.fixture(params=["sqlite", "postgresql"])
def registry_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema

    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'dmlsearch.db'}"
    else:
        with postgres_schema(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)) as url:
            yield url


def test_two_experiments_at_once_on_one_cluster_and_registry(
    client: Client, registry_url: str, tmp_path: Path, data: Any
) -> None:
    X, y = data
    spaces = {"left": [float(i) for i in range(12)], "right": [100.0 + i for i in range(12)]}
    searches = {
        name: SearchCV(
            SleepyClassifier(seconds=0.02),
            {"parameter": values},
            strategy="grid",
            cv=2,
            client=client,
            registry=Registry(registry_url, str(tmp_path / "artifacts")),
            experiment_name=name,
            progress=False,
        )
        for name, values in spaces.items()
    }
    errors: list[BaseException] = []
    started = threading.Barrier(2)

    def fit(search: SearchCV) -> None:
        try:
            started.wait()
            search.fit(X, y)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=fit, args=(s,)) for s in searches.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    with Registry(registry_url, str(tmp_path / "artifacts"), create=False) as registry:
        for name, values in spaces.items():
            search = searches[name]
            assert [p["parameter"] for p in search.cv_results_["params"]] == values
            assert {t.state for t in search.trials_} == {"complete"}
            trials = registry.trials(name)
            assert sorted(trials["number"]) == list(range(len(values)))
            assert sorted(trials["param_parameter"]) == values
            assert set(trials["state"]) == {"complete"}
            assert registry.experiment(name).status == "complete"
            assert registry.load_model(name).parameter in values
    # Both ran at the same time: their trials interleave in wall time.
    left, right = (searches[n].trials_ for n in spaces)
    assert min(t.started for t in right) < max(t.finished for t in left)
    assert min(t.started for t in left) < max(t.finished for t in right)


def test_python_m_dmlsearch_run_starts_the_embedded_cluster(tmp_path: Path) -> None:
    """``python -m dmlsearch run``: a package's __main__ is never re-run by workers."""
    import subprocess

    (tmp_path / "exp.yaml").write_text(
        "version: 1\nname: dash-m\ndata: {dataset: sklearn:load_iris}\n"
        "model: sklearn.linear_model.LogisticRegression\n"
        "search:\n  space: {C: [0.1, 1.0]}\n  strategy: grid\n  cv: 2\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "dmlsearch", "run", "exp.yaml", "--no-progress"],
        cwd=tmp_path,
        env={**os.environ, "DMLSEARCH_REGISTRY": f"sqlite:///{tmp_path / 'r.db'}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "best score" in proc.stdout


def test_a_script_read_from_standard_input_is_told_to_be_a_file(tmp_path: Path) -> None:
    """``python - < script.py``: workers cannot re-import a main script with no file (the
    embedded cluster failed with 'WarmNanny failed to start' and forkserver tracebacks)."""
    import subprocess

    script = (
        "from sklearn.datasets import make_classification\n"
        "from sklearn.linear_model import LogisticRegression\n"
        "from dmlsearch import SearchCV\n"
        "X, y = make_classification(40, 4, random_state=0)\n"
        "SearchCV(LogisticRegression(), {'C': [1.0]}, cv=2, progress=False).fit(X, y)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-"], input=script, cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "a script read from standard input has no file" in proc.stderr
    assert "WarmNanny" not in proc.stderr
