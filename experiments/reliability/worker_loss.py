"""Worker loss: a search while a random worker is SIGKILLed every few seconds, vs no kills.

What is measured
    A grid search of ``--trials`` (default 200) trials of ``CountingSleepy`` (sleeps
    ``--seconds`` per fold, ``cv=2``: about 0.2 s a trial) on 2 single-thread worker
    processes with nannies (``dmlsearch.testing.local_cluster(2)``, a fresh cluster per
    run), recording into a SQLite registry. In a *faulty* run a thread SIGKILLs a random
    live worker every ``--kill-every`` seconds (default 5) from the start of ``fit``; a
    *clean* run has no kills. Faulty and clean runs alternate, ``--repeats`` each.

    Checked per run: every trial exactly once in ``cv_results_`` and in the registry, and
    all ``complete`` (no healthy trial failed). Counted: kills, extra runs (a trial started
    on more than one worker process: each fold fit appends ``number pid`` to a log file).
    Timed: ``fit``'s wall time; the ratio faulty/clean uses the medians.

    Per kill, the timeline (seconds after the kill): the scheduler removes the worker
    (its ``remove-worker`` event), the nanny's new worker process joins (``add-worker``),
    the first trial starts on it.

Rerun
    python experiments/reliability/worker_loss.py               # 3 faulty + 3 clean runs
    python experiments/reliability/worker_loss.py --repeats 1   # a quick check
    python experiments/reliability/worker_loss.py --spawn       # Dask's nanny, as before
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import psutil
from _common import median, print_footer, print_header, print_table, quiet_warnings
from distributed import Client, Nanny
from sklearn.datasets import make_classification

from dmlsearch import Registry, SearchCV
from dmlsearch.runner import start_local_cluster
from dmlsearch.testing import SleepyClassifier, local_cluster


class CountingSleepy(SleepyClassifier):
    """A ``SleepyClassifier`` that logs each fit (``number pid``) to ``log``.

    Defined in ``__main__``, so cloudpickle sends it to workers by value.
    """

    def __init__(self, seconds: float = 0.0, parameter: float = 0.0, log: str = "") -> None:
        super().__init__(seconds=seconds, parameter=parameter)
        self.log = log

    def fit(self, X: Any, y: Any) -> CountingSleepy:
        if self.log:
            with open(self.log, "a", encoding="ascii") as f:
                f.write(f"{int(self.parameter)} {os.getpid()}\n")
        return super().fit(X, y)  # type: ignore[return-value]


def _membership_events(dask_scheduler: Any) -> list[tuple[float, dict[str, Any]]]:
    """On the scheduler: its add-worker and remove-worker events (time, action, worker)."""
    out = []
    for when, msg in dask_scheduler.get_events("all"):
        if isinstance(msg, dict) and msg.get("action") in ("add-worker", "remove-worker"):
            out.append((when, {"action": msg["action"], "worker": msg.get("worker")}))
    return out


def _workers(client: Client) -> dict[str, int]:
    """Live worker address -> pid (the worker processes are this process's grandchildren)."""
    addrs = set(client.scheduler_info(n_workers=-1)["workers"])
    ports = {int(a.rsplit(":", 1)[1]): a for a in addrs}
    out: dict[str, int] = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        for conn in conns:
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port in ports:
                out[ports[conn.laddr.port]] = proc.pid
    return out


class Killer(threading.Thread):
    """SIGKILLs a random live worker every ``every`` seconds until stopped."""

    def __init__(self, client: Client, every: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.every = every
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.kills: list[tuple[float, str, int]] = []

    def run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                live = _workers(self.client)
            except Exception:
                continue
            alive = {a: p for a, p in live.items() if psutil.pid_exists(p)}
            if not alive:
                continue
            addr = self.rng.choice(sorted(alive))
            pid = alive[addr]
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append((time.time(), addr, pid))


def one_run(args: argparse.Namespace, faulty: bool, seed: int) -> dict[str, Any]:
    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    tmp = tempfile.mkdtemp(prefix="dmlsearch-worker-loss-")
    log = os.path.join(tmp, "fits.log")
    registry = Registry(f"sqlite:///{tmp}/registry.db", artifacts=os.path.join(tmp, "art"))
    name = f"worker-loss-{'faulty' if faulty else 'clean'}-{seed}"
    # --spawn: Dask's own nanny (a fresh interpreter per worker process), as before.
    cluster = start_local_cluster(2, worker_class=Nanny) if args.spawn else local_cluster(2)
    try:
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(2)
            client.run(quiet_warnings)
            search = SearchCV(
                CountingSleepy(seconds=args.seconds, log=log),
                {"parameter": list(range(args.trials))},
                strategy="grid",
                cv=2,
                client=client,
                registry=registry,
                experiment_name=name,
                refit=False,
                progress=False,
                dashboard=False,
            )
            killer = Killer(client, args.kill_every, seed)
            t0 = time.perf_counter()
            if faulty:
                killer.start()
            search.fit(X, y)
            wall = time.perf_counter() - t0
            killer.stop.set()
            events = client.run_on_scheduler(_membership_events)
    finally:
        cluster.close()

    numbers = [p["parameter"] for p in search.cv_results_["params"]]
    trials = registry.trials(name)
    registry.close()
    fits: dict[int, list[int]] = defaultdict(list)
    with open(log, encoding="ascii") as f:
        for line in f:
            number, pid = line.split()
            fits[int(number)].append(int(pid))
    runs = {n: len(dict.fromkeys(p)) for n, p in fits.items()}
    out: dict[str, Any] = {
        "faulty": faulty,
        "wall": wall,
        "kills": len(killer.kills),
        "cv_once": sorted(numbers) == list(range(args.trials)),
        "registry_once": sorted(trials["number"].tolist()) == list(range(args.trials)),
        "all_complete": all(t.state == "complete" for t in search.trials_),
        "extra_runs": sum(r - 1 for r in runs.values()),
        "resubmitted": search.runner_stats_.resubmitted_trials,
        "rescattered": search.runner_stats_.rescattered,
        "max_batch": max(search.runner_stats_.batch_sizes, default=0),
        "timeline": _timeline(killer.kills, events, search),
    }
    return out


def _timeline(
    kills: list[tuple[float, str, int]],
    events: list[tuple[float, dict[str, Any]]],
    search: SearchCV,
) -> list[dict[str, float]]:
    removed = [(t, e.get("worker")) for t, e in events if e.get("action") == "remove-worker"]
    added = [(t, e.get("worker")) for t, e in events if e.get("action") == "add-worker"]
    starts = sorted((t.started, t.worker) for t in search.trials_)
    rows = []
    for when, addr, _pid in kills:
        row: dict[str, float] = {}
        rm = next((t for t, w in removed if w == addr and t >= when - 0.01), None)
        row["removed"] = (rm - when) if rm is not None else float("nan")
        joined = next(((t, w) for t, w in added if t >= when), None)
        row["joined"] = (joined[0] - when) if joined else float("nan")
        first = (
            next((s for s, w in starts if joined and w == joined[1] and s >= joined[0]), None)
            if joined
            else None
        )
        row["first_task"] = (first - when) if first is not None else float("nan")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=0.1, help="sleep per fold (cv=2)")
    parser.add_argument("--kill-every", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--spawn",
        action="store_true",
        help="Dask's own nanny (spawned worker processes), as before dmlsearch's WarmNanny",
    )
    args = parser.parse_args()
    quiet_warnings()
    print_header("worker loss: SIGKILL a random worker every few seconds", sys.argv, 2)
    print(
        f"search: grid of {args.trials} trials, {args.seconds} s sleep per fold, cv=2, "
        f"refit=False, SQLite registry; a random live worker SIGKILLed every "
        f"{args.kill_every} s in faulty runs; faulty and clean runs alternate; nanny: "
        + ("distributed.Nanny (spawn)" if args.spawn else "dmlsearch WarmNanny (fork server)")
    )
    results = []
    for i in range(args.repeats):
        for faulty in (True, False):
            r = one_run(args, faulty, seed=i)
            results.append(r)
            print(
                f"run {i} {'faulty' if faulty else 'clean '}: wall {r['wall']:.2f} s, "
                f"kills {r['kills']}, extra runs {r['extra_runs']}, resubmitted "
                f"{r['resubmitted']}, rescattered {r['rescattered']}, largest batch {r['max_batch']}, once in cv_results_ "
                f"{r['cv_once']}, once in registry {r['registry_once']}, all complete "
                f"{r['all_complete']}"
            )
            sys.stdout.flush()
    faulty_runs = [r for r in results if r["faulty"]]
    clean_runs = [r for r in results if not r["faulty"]]
    mf = median([r["wall"] for r in faulty_runs])
    mc = median([r["wall"] for r in clean_runs])
    kills = median([r["kills"] for r in faulty_runs])
    print()
    print_table(
        ["", "faulty", "clean"],
        [
            ["median wall (s)", mf, mc],
            ["median kills", kills, 0],
            [
                "median extra runs",
                median([r["extra_runs"] for r in faulty_runs]),
                median([r["extra_runs"] for r in clean_runs]),
            ],
            [
                "all exactly once, all complete",
                str(
                    all(
                        r["cv_once"] and r["registry_once"] and r["all_complete"]
                        for r in faulty_runs
                    )
                ),
                str(
                    all(
                        r["cv_once"] and r["registry_once"] and r["all_complete"]
                        for r in clean_runs
                    )
                ),
            ],
        ],
    )
    print(
        f"wall-time ratio faulty/clean (medians): {mf / mc:.2f}x; "
        f"cost per kill: {(mf - mc) / max(kills, 1):.2f} s"
    )
    rows = [row for r in faulty_runs for row in r["timeline"]]
    print()
    print(f"per kill, seconds after the kill (median of {len(rows)} kills):")
    print_table(
        ["event", "median", "max"],
        [
            [
                k,
                median([row[k] for row in rows if row[k] == row[k]]),
                max((row[k] for row in rows if row[k] == row[k]), default=float("nan")),
            ]
            for k in ("removed", "joined", "first_task")
        ],
    )
    print_footer()


if __name__ == "__main__":
    main()
