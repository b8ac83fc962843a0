"""Helpers shared by the benchmark scripts in this folder (not a benchmark itself).

The scripts import it as ``_common``: running ``python experiments/benchmarks/<name>.py``
puts this folder first on ``sys.path``.
"""

from __future__ import annotations

import datetime
import gc
import os
import platform
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psutil
from distributed import Client

MB = 1024.0**2

CLUSTER_NOTE = (
    "cluster: LocalCluster(n_workers={n}, threads_per_worker=1, processes=True, "
    "host='127.0.0.1', dashboard_address='127.0.0.1:0') created inside "
    "dask.config.set({{'distributed.worker.profile.enabled': False}}); "
    "dmlsearch and every Dask peer run on this same cluster"
)


@contextmanager
def local_cluster(n_workers: int = 2) -> Iterator[Client]:
    """The benchmark cluster: single-thread worker processes, worker profiler off."""
    from dmlsearch.runner import start_local_cluster

    cluster = start_local_cluster(n_workers)
    client = Client(cluster)  # also the default client (joblib's Dask backend uses it)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def quiet_warnings() -> None:
    """Silence estimator warnings (convergence, deprecations) in this process."""
    from sklearn.exceptions import ConvergenceWarning

    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=r".*is experimental")  # optuna's DaskStorage


def _warm_worker() -> str:
    """Import what every approach runs on a worker and fit one tiny model."""
    import importlib

    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    quiet_warnings()
    for name in ("dmlsearch._evaluate", "dask_ml.model_selection", "optuna"):
        with suppress(ImportError):
            importlib.import_module(name)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] > 0).astype(int)
    cross_val_score(LogisticRegression(), X, y, cv=3)
    return "ok"


def warm_up(client: Client, n_workers: int) -> None:
    """Warm every worker (imports, one tiny sklearn fit) and the driver alike."""
    client.wait_for_workers(n_workers)
    client.run(_warm_worker)
    _warm_worker()


def rss(pid: int | None = None) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def _worker_rss() -> int:
    return int(psutil.Process().memory_info().rss)


def worker_rss_mb(client: Client) -> list[float]:
    """Resident memory of each worker process (MB), in worker-address order."""
    out = client.run(_worker_rss)
    return [out[k] / MB for k in sorted(out)]


def scheduler_rss_mb(client: Client) -> float:
    return float(client.run_on_scheduler(_worker_rss)) / MB


class PeakRSS:
    """Peak resident memory of this process during a ``with`` block, sampled by a thread.

    ``delta_mb`` is the peak minus the baseline read (after ``gc.collect()``) on entry.
    """

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.baseline = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        proc = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, int(proc.memory_info().rss))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.baseline = rss()
        self.peak = self.baseline
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, rss())

    @property
    def delta_mb(self) -> float:
        return (self.peak - self.baseline) / MB


@contextmanager
def timer() -> Iterator[list[float]]:
    """``with timer() as t: ...`` then ``t[0]`` is the wall time in seconds."""
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain fixed-width table; first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        return "  ".join(parts).rstrip()

    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
    sys.stdout.flush()


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), or what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (the machine may be shared)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f} (1/5/15 min)"


def _versions() -> str:
    import importlib

    names = [
        ("dmlsearch", "dmlsearch"),
        ("dask", "dask"),
        ("distributed", "distributed"),
        ("scikit-learn", "sklearn"),
        ("joblib", "joblib"),
        ("dask-ml", "dask_ml"),
        ("optuna", "optuna"),
        ("numpy", "numpy"),
        ("SQLAlchemy", "sqlalchemy"),
    ]
    out = []
    for label, module in names:
        try:
            out.append(f"{label} {importlib.import_module(module).__version__}")
        except ImportError:
            out.append(f"{label} (not installed)")
    return ", ".join(out)


def source_state(package_dir: str) -> str:
    """``package_dir`` with the git commit it is at and how many of its files differ from it."""
    import subprocess

    def git(*args: str) -> str:
        proc = subprocess.run(
            ["git", "-C", package_dir, *args], capture_output=True, text=True, check=False
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""

    snapshot = os.path.join(os.path.dirname(package_dir), "SNAPSHOT")
    if os.path.exists(snapshot):  # a tree exported with `git archive`, see docs/benchmarks.md
        with open(snapshot, encoding="utf-8") as f:
            return f"{package_dir} ({f.read().strip()})"
    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return f"{package_dir} (not a git checkout)"
    changed = [ln for ln in git("status", "--porcelain", "--", ".").splitlines() if ln]
    return f"{package_dir} (git HEAD {head}, {len(changed)} uncommitted change(s) under it)"


def header_lines(title: str, argv: Sequence[str]) -> list[str]:
    """The header every raw results file starts with: command, date, machine, load."""
    import dmlsearch

    return [
        f"== {title}",
        f"command: python {' '.join(argv)}",
        f"date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"host: {platform.machine()}, {os.cpu_count()} logical CPUs ({cpu_model()}), "
        f"{psutil.virtual_memory().total / 2**30:.1f} GiB RAM, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}",
        f"versions: {_versions()}",
        f"dmlsearch imported from: {source_state(os.path.dirname(dmlsearch.__file__))}",
        f"load average at start: {load_average()} on {os.cpu_count()} CPUs "
        "(the machine is shared with other jobs)",
    ]


def print_header(title: str, argv: Sequence[str], n_workers: int | str | None = 2) -> None:
    """Print :func:`header_lines` (and the cluster used, unless ``n_workers`` is None)."""
    for line in header_lines(title, argv):
        print(line)
    if n_workers is not None:
        print(CLUSTER_NOTE.format(n=n_workers))
    sys.stdout.flush()


def print_footer() -> None:
    """The load average at the end of a run (paired with the header's)."""
    print(f"load average at end: {load_average()}")
    sys.stdout.flush()
