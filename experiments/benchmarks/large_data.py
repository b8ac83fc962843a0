"""Large data: 16 short trials on a 200 MB array, by five ways of shipping the data.

What is measured
    X is 500,000 x 50 float64 (200 MB; ``--quick``: 20,000 x 50), y binary; 16 trials of
    ``SGDClassifier(alpha=a, max_iter=5, tol=None, random_state=0)``, alpha on
    ``np.logspace(-6, 1, 16)``, ``cv=KFold(2)``, no refit. Approaches, all on one 2-worker
    cluster:

    (a) scatter-once: ``client.scatter`` X and y once, submit 16 ``cross_val_score`` tasks
        taking the futures, gather;
    (b) scikit-learn ``GridSearchCV(n_jobs=-1)`` under joblib's Dask backend;
    (c) dask-ml ``GridSearchCV(scheduler=client)``;
    (d) closure: 16 ``client.submit`` of a function that captures X and y;
    (e) dmlsearch ``SearchCV(strategy="grid", cv=KFold(2))``;
    (f) (e) with ``dashboard=False``;
    (s) (a) with the data scattered as dmlsearch does (``direct=True, broadcast=True``);
    (g) (e) after the workers imported what a dmlsearch task needs (untimed):
        ``dmlsearch.runner.loop`` and ``dmlsearch._evaluate``;
    (h) (e) after the workers imported ``optuna`` alone (untimed);
    (o) (e) with the dmlsearch package found at ``--old PATH`` (cold runs only: the child
        starts with ``PYTHONPATH=PATH``, and so do the workers of its fresh cluster).

    Each (approach, repeat) runs in a fresh child process of this script (``--only NAME``)
    that connects to the parent's cluster and loads the data the parent generated once
    (``np.load`` of a temporary ``.npy``), so every driver starts from the same state; an
    untimed warm-up run on the first 2,000 rows precedes the measured run.
    Reported: wall time of the approach (median of ``--repeats``; data load and client
    connection excluded), ratio to (a), the driver's peak RSS minus its RSS just before the
    approach (psutil, sampler thread every 20 ms), the same for the workers (a sampler
    thread on each worker, summed over workers), the workers' RSS after the approach once
    its futures are released, and the scheduler's RSS. The best alpha and score are
    printed to check that all approaches computed the same thing. Repeats are interleaved
    and the order of the approaches rotates by one at each repeat.

Rerun
    python experiments/benchmarks/large_data.py            # 500,000 rows, 3 repeats
    python experiments/benchmarks/large_data.py --quick    # 20,000 rows, 1 repeat
    python experiments/benchmarks/large_data.py --approaches ae   # the reference and dmlsearch
    python experiments/benchmarks/large_data.py --cold --rows 300000 --approaches aefg
        # cold cluster: a fresh cluster per run; f and g isolate suspects (see docs)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from _common import (
    MB,
    PeakRSS,
    local_cluster,
    median,
    print_footer,
    print_header,
    print_table,
    quiet_warnings,
    timer,
    warm_up,
    worker_rss_mb,
)
from distributed import Client
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import KFold, cross_val_score

N_WORKERS = 2
N_FEATURES = 50
ALPHAS = np.logspace(-6, 1, 16)
APPROACHES = {
    "a": "(a) scatter-once loop",
    "b": "(b) GridSearchCV + joblib dask",
    "c": "(c) dask-ml GridSearchCV",
    "d": "(d) closure capturing X, y",
    "e": "(e) dmlsearch SearchCV grid",
    "s": "(s) loop, scatter as dmlsearch does",
    "f": "(f) dmlsearch, dashboard=False",
    "g": "(g) dmlsearch, its task imports done",
    "h": "(h) dmlsearch, optuna pre-imported",
    "o": "(o) dmlsearch from --old PATH",
}


def _sgd(alpha: float = 1e-4) -> SGDClassifier:
    return SGDClassifier(alpha=alpha, max_iter=5, tol=None, random_state=0)


def _cv_mean(X: np.ndarray, y: np.ndarray, alpha: float) -> float:
    quiet_warnings()
    return float(cross_val_score(_sgd(alpha), X, y, cv=KFold(2)).mean())


# -- the five approaches: each returns the 16 mean CV scores, in ALPHAS order ---------------
# (start, end, worker) of each trial of the last run, wall clock; set by (a) and (e)-(g).
TRIAL_TIMES: list[tuple[float, float, str]] = []


def _cv_mean_timed(X: np.ndarray, y: np.ndarray, alpha: float) -> tuple[float, float, float, str]:
    import os

    started = time.time()
    score = _cv_mean(X, y, alpha)
    return score, started, time.time(), str(os.getpid())


def run_scatter_once(
    client: Client, X: np.ndarray, y: np.ndarray, broadcast: bool = False
) -> list[float]:
    if broadcast:  # as dmlsearch scatters: straight to every worker
        X_f, y_f = (client.scatter([v], hash=False, direct=True, broadcast=True)[0] for v in (X, y))
    else:
        X_f = client.scatter(X, hash=False)
        y_f = client.scatter(y, hash=False)
    futures = [client.submit(_cv_mean_timed, X_f, y_f, a, pure=False) for a in ALPHAS]
    out = client.gather(futures)
    del futures, X_f, y_f
    TRIAL_TIMES[:] = [(o[1], o[2], o[3]) for o in out]
    return [o[0] for o in out]


def run_scatter_broadcast(client: Client, X: np.ndarray, y: np.ndarray) -> list[float]:
    return run_scatter_once(client, X, y, broadcast=True)


def run_joblib_dask(client: Client, X: np.ndarray, y: np.ndarray) -> list[float]:
    import joblib
    from sklearn.model_selection import GridSearchCV

    with joblib.parallel_config(backend="dask", client=client):
        gs = GridSearchCV(_sgd(), {"alpha": list(ALPHAS)}, cv=KFold(2), n_jobs=-1, refit=False)
        gs.fit(X, y)
    return list(gs.cv_results_["mean_test_score"])


def run_dask_ml(client: Client, X: np.ndarray, y: np.ndarray) -> list[float]:
    from dask_ml.model_selection import GridSearchCV

    gs = GridSearchCV(_sgd(), {"alpha": list(ALPHAS)}, cv=KFold(2), scheduler=client, refit=False)
    gs.fit(X, y)
    return list(gs.cv_results_["mean_test_score"])


def run_closure(client: Client, X: np.ndarray, y: np.ndarray) -> list[float]:
    def make_task(alpha: float) -> Callable[[], float]:
        def task() -> float:
            return _cv_mean(X, y, alpha)

        return task

    futures = [client.submit(make_task(a), pure=False) for a in ALPHAS]
    scores = client.gather(futures)
    del futures
    return list(scores)


def run_dmlsearch(
    client: Client, X: np.ndarray, y: np.ndarray, dashboard: bool = True
) -> list[float]:
    import dmlsearch

    search = dmlsearch.SearchCV(
        _sgd(),
        {"alpha": list(ALPHAS)},
        strategy="grid",
        cv=KFold(2),
        refit=False,
        client=client,
        random_state=0,
        progress=False,
        dashboard=dashboard,
    )
    search.fit(X, y)
    TRIAL_TIMES[:] = [(t.started, t.finished, t.worker) for t in search.trials_]
    return list(search.cv_results_["mean_test_score"])


def run_dmlsearch_no_dashboard(client: Client, X: np.ndarray, y: np.ndarray) -> list[float]:
    return run_dmlsearch(client, X, y, dashboard=False)


def _import(name: str) -> int:
    import importlib
    import sys

    before = len(sys.modules)
    importlib.import_module(name)
    return len(sys.modules) - before


# Untimed preparation an approach does once its cluster is up (cold runs: isolates a suspect):
# (g) what a dmlsearch task imports on a worker (the task wrapper's module and run_trials'),
# (h) optuna alone, which the first brings in through dmlsearch.runner -> strategies.
PREPARE: dict[str, Callable[[Client], Any]] = {
    "g": lambda client: [
        client.run(_import, m) for m in ("dmlsearch.runner.loop", "dmlsearch._evaluate")
    ],
    "h": lambda client: client.run(_import, "optuna"),
}


RUNNERS: dict[str, Callable[[Client, np.ndarray, np.ndarray], list[float]]] = {
    "a": run_scatter_once,
    "b": run_joblib_dask,
    "c": run_dask_ml,
    "d": run_closure,
    "e": run_dmlsearch,
    "s": run_scatter_broadcast,
    "f": run_dmlsearch_no_dashboard,
    "g": run_dmlsearch,
    "h": run_dmlsearch,
    "o": run_dmlsearch,
}
DRIVER_MODULES = (
    "dmlsearch.search",
    "dmlsearch.runner",
    "dmlsearch.dashboard",
    "dmlsearch.strategies",
    "sklearn.linear_model",
    "sklearn.model_selection",
    "sklearn.metrics",
)


# -- peak RSS and CPU time of the workers and the scheduler -------------------------------
def _start_sampler(dask_worker: Any = None, dask_scheduler: Any = None) -> int:
    state: dict[str, Any] = {"peak": 0, "stop": threading.Event()}
    proc = psutil.Process()

    def loop() -> None:
        while not state["stop"].is_set():
            state["peak"] = max(state["peak"], int(proc.memory_info().rss))
            state["stop"].wait(0.02)

    state["peak"] = int(proc.memory_info().rss)
    cpu = proc.cpu_times()
    state["cpu"] = cpu.user + cpu.system
    threading.Thread(target=loop, daemon=True).start()
    (dask_worker or dask_scheduler)._bench_rss = state
    return int(state["peak"])


def _stop_sampler(dask_worker: Any = None, dask_scheduler: Any = None) -> tuple[int, float]:
    state = (dask_worker or dask_scheduler)._bench_rss
    state["stop"].set()
    proc = psutil.Process()
    cpu = proc.cpu_times()
    peak = max(state["peak"], int(proc.memory_info().rss))
    return peak, cpu.user + cpu.system - state["cpu"]


# -- child: one approach, one repeat --------------------------------------------------------
def child(name: str, scheduler: str | None, data_dir: str) -> dict[str, Any]:
    """One timed run; ``scheduler=None``: a cold run on a fresh cluster of its own."""
    import importlib
    from contextlib import suppress

    import joblib  # noqa: F401  (imports are not part of the timing)

    for module in DRIVER_MODULES:  # the driver's imports, before the clock (dmlsearch's are lazy)
        importlib.import_module(module)
    with suppress(ImportError):
        importlib.import_module("dask_ml.model_selection")
    quiet_warnings()
    if scheduler is None:
        with local_cluster(N_WORKERS) as client:
            client.wait_for_workers(N_WORKERS)
            return _measure(name, client, data_dir, warm=False)
    client = Client(scheduler)
    client.wait_for_workers(N_WORKERS)
    try:
        return _measure(name, client, data_dir, warm=True)
    finally:
        client.close()


def _measure(name: str, client: Client, data_dir: str, warm: bool) -> dict[str, Any]:
    X = np.load(Path(data_dir) / "X.npy")
    y = np.load(Path(data_dir) / "y.npy")
    if warm:
        RUNNERS[name](client, X[:2000].copy(), y[:2000].copy())  # untimed warm-up (lazy imports)
    if name in PREPARE:
        PREPARE[name](client)
    gc.collect()
    time.sleep(0.2)
    before = client.run(_start_sampler)
    sched_before = client.run_on_scheduler(_start_sampler)
    modules = set(sys.modules)
    cpu0 = psutil.Process().cpu_times()
    TRIAL_TIMES.clear()
    wall0 = time.time()
    with PeakRSS(0.02) as mem, timer() as t:
        scores = RUNNERS[name](client, X, y)
    wall1 = time.time()
    cpu1 = psutil.Process().cpu_times()
    firsts: dict[str, float] = {}
    for started, _, worker in TRIAL_TIMES:
        firsts[worker] = min(firsts.get(worker, started), started)
    driver_imports = sorted(set(sys.modules) - modules)
    peaks = client.run(_stop_sampler)
    sched_peak = client.run_on_scheduler(_stop_sampler)[0]
    gc.collect()
    time.sleep(0.5)  # let the scheduler release what this approach left
    best = int(np.nanargmax(scores))
    result = {
        "wall": t[0],
        "driver_peak_mb": mem.delta_mb,
        "driver_base_mb": mem.baseline / MB,
        "worker_peak_mb": sum(peaks[w][0] - before[w] for w in before) / MB,
        "worker_cpu_s": [round(peaks[w][1], 2) for w in sorted(peaks)],
        # The driver process's CPU time (in a cold run it also hosts the scheduler).
        "driver_cpu_s": cpu1.user + cpu1.system - cpu0.user - cpu0.system,
        # Seconds from the start of the clock to the first trial's start on each worker
        # (sorted), and from the last trial's end to the end of the clock.
        "first_trial_s": sorted(v - wall0 for v in firsts.values()),
        "after_last_s": wall1 - max((e for _, e, _ in TRIAL_TIMES), default=wall1),
        "scheduler_peak_mb": (sched_peak - sched_before) / MB,
        "worker_after_mb": sum(worker_rss_mb(client)),
        "best_alpha": float(ALPHAS[best]),
        "best_score": float(scores[best]),
        "driver_imports": driver_imports,
        "dmlsearch_from": _dmlsearch_dir(),
    }
    return result


def _dmlsearch_dir() -> str:
    import dmlsearch

    return os.path.dirname(dmlsearch.__file__)


def _names(modules: list[str]) -> str:
    return ", ".join(modules[:6]) + (f" and {len(modules) - 6} more" if len(modules) > 6 else "")


def run_child(
    name: str, scheduler: str | None, data_dir: str, old: str | None = None
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--only", name, "--data", data_dir]
    cmd += ["--cold"] if scheduler is None else ["--scheduler", scheduler]
    env = None
    if name == "o":
        assert old is not None
        env = dict(os.environ, PYTHONPATH=old)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stdout.write(proc.stdout + proc.stderr)
        raise RuntimeError(f"approach {name} failed with exit code {proc.returncode}")
    result = dict(json.loads(lines[-1][len("RESULT ") :]))
    result["stderr"] = [ln for ln in proc.stderr.splitlines() if "Warning" in ln][:3]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 1 repeat")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--approaches",
        default="abcde",
        help="letters of the approaches to run (default abcde; (a) always runs: it is the "
        "reference; f and g are dmlsearch variants that isolate a cold-start suspect)",
    )
    parser.add_argument(
        "--old",
        metavar="PATH",
        help="with --cold: also run (o), dmlsearch imported from PATH (a folder holding a "
        "dmlsearch package, e.g. an older commit's tree)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="cold cluster: every run starts a fresh 2-worker LocalCluster in its driver "
        "process (not timed; the driver's imports are done first) and has no warm-up run",
    )
    parser.add_argument("--only", choices=sorted(RUNNERS), help="child mode: one approach")
    parser.add_argument("--scheduler", help="child mode: scheduler address")
    parser.add_argument("--data", help="child mode: folder with X.npy and y.npy")
    args = parser.parse_args(argv)
    if args.only:
        if not (args.data and (args.scheduler or args.cold)):
            parser.error("--only needs --data and --scheduler or --cold (the parent passes them)")
        scheduler = None if args.cold else args.scheduler
        print("RESULT " + json.dumps(child(args.only, scheduler, args.data)), flush=True)
        return 0

    if args.old and not args.cold:
        parser.error("--old needs --cold (each run then starts its own cluster)")
    if args.old:
        args.approaches += "o"
        args.old = os.path.abspath(args.old)
    rows = args.rows or (20_000 if args.quick else 500_000)
    repeats = args.repeats or (1 if args.quick else 3)
    quiet_warnings()
    print_header(
        "large data: 16 trials on one big array",
        ["experiments/benchmarks/large_data.py", *sys.argv[1:]],
    )
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, N_FEATURES))
    y = (X @ rng.standard_normal(N_FEATURES) + rng.standard_normal(rows) > 0).astype(np.int64)
    print(
        f"workload: X {rows:,} x {N_FEATURES} float64 ({X.nbytes / MB:.0f} MB), y binary; "
        f"16 x SGDClassifier(alpha, max_iter=5, tol=None), cv=KFold(2), no refit; "
        f"repeats={repeats}; each run in a fresh child process "
        + (
            "that starts a fresh 2-worker cluster (COLD: no warm-up run, workers have "
            "imported nothing; the driver's imports are done before the clock)"
            if args.cold
            else "on the shared cluster"
        )
    )
    with tempfile.TemporaryDirectory(prefix="dmlsearch-bench-") as data_dir:
        np.save(Path(data_dir) / "X.npy", X)
        np.save(Path(data_dir) / "y.npy", y)
        del X, y
        gc.collect()
        chosen = ["a", *(k for k in RUNNERS if k in args.approaches and k != "a")]
        results: dict[str, list[dict[str, Any]]] = {k: [] for k in chosen}

        def one_pass(address: str | None, r: int) -> None:
            # Rotate the order so no approach always runs first on a fresh allocator.
            for name in chosen[r % len(chosen) :] + chosen[: r % len(chosen)]:
                res = run_child(name, address, data_dir, args.old)
                results[name].append(res)
                print(
                    f"  repeat {r + 1}/{repeats}  {APPROACHES[name]:<36} {res['wall']:7.2f} s"
                    f"  driver +{res['driver_peak_mb']:7.1f} MB  workers "
                    f"+{res['worker_peak_mb']:7.1f} MB  after {res['worker_after_mb']:7.1f} MB"
                    f"  first trial on each worker after "
                    f"{'/'.join(f'{x:.2f}' for x in res['first_trial_s']) or '-'} s, "
                    f"{res['after_last_s']:.2f} s after the last"
                    f"  driver imported in the timed run: {_names(res['driver_imports'])}"
                    f"  dmlsearch from {res['dmlsearch_from']}",
                    flush=True,
                )

        if args.cold:
            for r in range(repeats):
                one_pass(None, r)
            final_workers: list[float] = []
        else:
            with local_cluster(N_WORKERS) as client:
                warm_up(client, N_WORKERS)
                address = str(getattr(client.scheduler, "address", ""))
                for r in range(repeats):
                    one_pass(address, r)
                final_workers = worker_rss_mb(client)
    for name in chosen:
        warned = sorted({ln.strip() for res in results[name] for ln in res["stderr"]})
        for line in warned:
            print(f"  {APPROACHES[name]} driver warned: {line[:200]}")

    def med(name: str, key: str) -> float:
        return median([res[key] for res in results[name]])

    ref = med("a", "wall")
    table = []
    for name in chosen:
        last = results[name][-1]
        table.append(
            [
                APPROACHES[name],
                med(name, "wall"),
                med(name, "wall") / ref,
                med(name, "driver_peak_mb"),
                med(name, "worker_peak_mb"),
                last["worker_after_mb"],
                med(name, "scheduler_peak_mb"),
                "/".join(f"{c:.1f}" for c in last["worker_cpu_s"]),
                f"{last['best_alpha']:.3g}",
                f"{last['best_score']:.4f}",
            ]
        )
    mode = "COLD cluster (fresh per run)" if args.cold else "warm shared cluster"
    print(f"\n-- large data, {mode}: medians of {repeats} repeat(s); memory in MB")
    print_table(
        [
            "approach",
            "wall s",
            "x (a)",
            "driver peak +",
            "workers peak +",
            "workers after",
            "scheduler peak +",
            "worker CPU s",
            "best alpha",
            "best score",
        ],
        table,
    )
    print(
        "driver peak + = driver peak RSS minus its RSS before the approach (data already "
        "loaded); workers peak + = sum over workers of peak minus RSS before the approach; "
        "workers after = sum of worker RSS after the approach, futures released (last "
        "repeat); scheduler peak + likewise for the scheduler; worker CPU s = CPU seconds "
        "each worker used during the approach (last repeat); workers at the end: "
        f"{', '.join(f'{m:.0f}' for m in final_workers) or '-'} MB"
    )
    print(
        "\nCPU seconds (medians over repeats; steadier than wall time on a shared machine): "
        + "; ".join(
            f"{APPROACHES[name]}: workers {median([sum(r['worker_cpu_s']) for r in results[name]]):.2f}"
            f", driver {median([r['driver_cpu_s'] for r in results[name]]):.2f}"
            for name in chosen
        )
    )
    print("\nFirst trial's start on each worker, seconds after the clock started (medians):")
    for name in chosen:
        timed = [r["first_trial_s"] for r in results[name] if len(r["first_trial_s"]) == 2]
        if timed:
            print(
                f"  {APPROACHES[name]:<36} first worker {median([x[0] for x in timed]):.2f}, "
                f"second worker {median([x[1] for x in timed]):.2f}; from the last trial's end "
                f"to the end {median([r['after_last_s'] for r in results[name]]):.2f}"
            )
    ref_runs = [res["wall"] for res in results["a"]]
    for name in chosen[1:]:
        ratios = [res["wall"] / a for res, a in zip(results[name], ref_runs, strict=False)]
        listed = ", ".join(f"{x:.2f}" for x in ratios)
        print(
            f"{APPROACHES[name]} / (a), run by run in the same repeat: {listed}; "
            f"median {median(ratios):.2f}"
        )
    print_footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
