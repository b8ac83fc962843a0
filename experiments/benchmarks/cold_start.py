"""What a first search on fresh workers pays that a scatter-once loop does not, suspect by suspect.

What is measured
    Each repeat starts a fresh 2-worker LocalCluster (the benchmark settings, see
    ``_common.py``) in a fresh child process whose driver-side imports are done first, and
    times, in this order, on that cold cluster:

    1. ``cluster_shape(client)`` (``scheduler_info``; a search calls it with a registry);
    2. the report-stream subscription and its close (a search with ``trial_timeout``);
    3. ``DashboardReporter.attach`` (registers the scheduler plugin, then sends the
       experiment event and waits for it), first on the fresh scheduler, then again;
    4. scattering X and y (``--rows`` x 50 float64): once to one worker
       (``client.scatter(X, hash=False)``, what the loop does) and broadcast to every
       worker (``direct=True, broadcast=True``, what dmlsearch's loop does), in an order
       that alternates between repeats, the futures released in between;
    5. worker-side imports, timed on the workers with ``client.run`` (max over the two
       workers, which import in parallel): first what the loop's task needs
       (``sklearn.linear_model``, ``sklearn.model_selection``), then what a dmlsearch task
       adds on top: ``dmlsearch._evaluate`` (where ``run_trials`` lives), then
       ``dmlsearch.runner.loop`` (where the task wrapper ``execute`` lives), and the
       number of modules each adds.

    Reported: medians over ``--repeats`` fresh clusters, and every run.

Rerun
    python experiments/benchmarks/cold_start.py                 # 300,000 rows, 3 repeats
    python experiments/benchmarks/cold_start.py --rows 20000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import numpy as np
from _common import local_cluster, median, print_footer, print_header, print_table, quiet_warnings
from distributed import Client

N_WORKERS = 2
N_FEATURES = 50
STEPS = [
    "cluster_shape(client)",
    "report stream subscribe + close",
    "dashboard attach, fresh scheduler",
    "dashboard attach, again",
    "scatter X, y to one worker (loop)",
    "scatter X, y broadcast direct (dmlsearch)",
    "worker import sklearn.linear_model + model_selection",
    "worker import dmlsearch._evaluate (after sklearn)",
    "worker import dmlsearch.runner.loop (after _evaluate)",
]


def _timed_import(names: list[str]) -> tuple[float, int, list[str]]:
    import importlib
    import sys as _sys

    before = set(_sys.modules)
    t0 = time.perf_counter()
    for name in names:
        importlib.import_module(name)
    elapsed = time.perf_counter() - t0
    new = set(_sys.modules) - before
    return elapsed, len(new), sorted({m.split(".")[0] for m in new})


def _worker_import(client: Client, names: list[str]) -> tuple[float, int, list[str]]:
    out = client.run(_timed_import, names)
    worst = max(out.values(), key=lambda v: v[0])
    return float(worst[0]), int(worst[1]), list(worst[2])


def child(rows: int, repeat: int) -> dict[str, Any]:
    from dmlsearch.dashboard import DashboardReporter
    from dmlsearch.runner import cluster_shape
    from dmlsearch.runner.reports import ReportStream

    quiet_warnings()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, N_FEATURES))
    y = (X[:, 0] > 0).astype(np.int64)
    times: dict[str, float] = {}
    extra: dict[str, Any] = {}
    with local_cluster(N_WORKERS) as client:
        client.wait_for_workers(N_WORKERS)

        def clock(step: str, fn: Any) -> Any:
            t0 = time.perf_counter()
            out = fn()
            times[step] = time.perf_counter() - t0
            return out

        clock(STEPS[0], lambda: cluster_shape(client))

        def subscribe() -> None:
            stream = ReportStream(client, "dmlsearch-cold-start")
            stream.subscribe()
            stream.close()

        clock(STEPS[1], subscribe)
        meta = {"estimator": "SGDClassifier", "strategy": "grid", "total": 16}
        clock(STEPS[2], lambda: DashboardReporter.attach(client, "cold-1", meta))
        clock(STEPS[3], lambda: DashboardReporter.attach(client, "cold-2", meta))

        def one() -> None:
            futures = [client.scatter(X, hash=False), client.scatter(y, hash=False)]
            client.cancel(futures)

        def broadcast() -> None:
            futures = [
                client.scatter([obj], hash=False, direct=True, broadcast=True)[0] for obj in (X, y)
            ]
            client.cancel(futures)

        order = [(STEPS[4], one), (STEPS[5], broadcast)]
        for step, fn in order if repeat % 2 == 0 else order[::-1]:
            clock(step, fn)
            time.sleep(0.5)  # let the workers free the data
        for step, names in (
            (STEPS[6], ["sklearn.linear_model", "sklearn.model_selection"]),
            (STEPS[7], ["dmlsearch._evaluate"]),
            (STEPS[8], ["dmlsearch.runner.loop"]),
        ):
            seconds, count, top = _worker_import(client, names)
            times[step] = seconds
            extra[step] = f"+{count} modules" + (
                f" ({', '.join(t for t in top if t not in ('dmlsearch',))})"
                if step != STEPS[6]
                else ""
            )
    return {"times": times, "extra": extra}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print("RESULT " + json.dumps(child(args.rows, args.child)), flush=True)
        return 0
    print_header(
        "cold start: suspects on a fresh cluster",
        ["experiments/benchmarks/cold_start.py", *sys.argv[1:]],
    )
    print(
        f"data: {args.rows:,} x {N_FEATURES} float64 ({args.rows * N_FEATURES * 8 / 2**20:.0f} MB); "
        "each repeat: a fresh child process starting a fresh cluster"
    )
    runs: list[dict[str, Any]] = []
    for r in range(args.repeats):
        cmd = [sys.executable, __file__, "--rows", str(args.rows), "--child", str(r)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            sys.stdout.write(proc.stdout + proc.stderr)
            raise RuntimeError(f"repeat {r + 1} failed with exit code {proc.returncode}")
        res = json.loads(lines[-1][len("RESULT ") :])
        runs.append(res)
        listed = "; ".join(f"{k}: {v:.3f} s" for k, v in res["times"].items())
        print(f"  repeat {r + 1}/{args.repeats}  {listed}", flush=True)
    rows = []
    for step in STEPS:
        values = [run["times"][step] for run in runs]
        rows.append(
            [
                step,
                median(values),
                " / ".join(f"{v:.3f}" for v in values),
                runs[-1]["extra"].get(step, ""),
            ]
        )
    print(f"\n-- cold start: seconds, medians of {args.repeats} fresh clusters")
    print_table(["step", "median s", "runs", "note (last run)"], rows)
    print_footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
