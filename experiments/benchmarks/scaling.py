"""Scaling: the same 40 half-second trials on a 1-worker and on a 2-worker cluster.

What is measured
    40 trials (``--quick``: 12) of ``_slow_estimator.SlowClassifier`` (``fit`` sleeps
    0.25 s, then computes class centroids), C on ``np.logspace(-2, 2, n)``,
    ``cv=KFold(2)``, so each trial is two 0.25 s fits; data
    ``make_classification(n_samples=400, n_features=10, random_state=0)``; no refit.
    Each approach runs ``--repeats`` times (interleaved) on a 1-worker LocalCluster, then
    on a 2-worker one; reported are the median wall times, the speedup (1-worker time /
    2-worker time) and the share of the wall time spent in the fits' sleeps
    (trials x 2 x 0.25 s / (wall x workers)). Approaches: dmlsearch
    ``SearchCV(strategy="grid")``, scikit-learn ``GridSearchCV(n_jobs=-1)`` under joblib's
    Dask backend, and dask-ml ``GridSearchCV(scheduler=client)``, all on the same cluster.

    The estimator lives in ``_slow_estimator.py`` beside this script; this folder is put
    on PYTHONPATH before the clusters start so the workers can import it.

Rerun
    python experiments/benchmarks/scaling.py            # 40 trials, 3 repeats
    python experiments/benchmarks/scaling.py --quick    # 12 trials, 1 repeat
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    local_cluster,
    median,
    print_footer,
    print_header,
    print_table,
    quiet_warnings,
    timer,
)
from _common import warm_up as warm_up_cluster
from distributed import Client
from sklearn.datasets import make_classification
from sklearn.model_selection import KFold

HERE = Path(__file__).resolve().parent
DELAY = 0.25
Approach = Callable[[Client, np.ndarray, np.ndarray, np.ndarray], dict[str, Any]]


def _estimator() -> Any:
    from _slow_estimator import SlowClassifier

    return SlowClassifier(delay=DELAY)


def run_dmlsearch(client: Client, X: np.ndarray, y: np.ndarray, cs: np.ndarray) -> dict[str, Any]:
    import dmlsearch

    search = dmlsearch.SearchCV(
        _estimator(),
        {"C": list(cs)},
        strategy="grid",
        cv=KFold(2),
        refit=False,
        client=client,
        random_state=0,
        progress=False,
    ).fit(X, y)
    workers = {t.worker for t in search.trials_}
    return {
        "trials_per_task": max(search.runner_stats_.batch_sizes),
        "workers_used": len(workers),
    }


def run_joblib_dask(client: Client, X: np.ndarray, y: np.ndarray, cs: np.ndarray) -> dict[str, Any]:
    import joblib
    from sklearn.model_selection import GridSearchCV

    with joblib.parallel_config(backend="dask", client=client):
        GridSearchCV(_estimator(), {"C": list(cs)}, cv=KFold(2), n_jobs=-1, refit=False).fit(X, y)
    return {}


def run_dask_ml(client: Client, X: np.ndarray, y: np.ndarray, cs: np.ndarray) -> dict[str, Any]:
    from dask_ml.model_selection import GridSearchCV

    GridSearchCV(_estimator(), {"C": list(cs)}, cv=KFold(2), scheduler=client, refit=False).fit(
        X, y
    )
    return {}


APPROACHES: list[tuple[str, Approach]] = [
    ("dmlsearch SearchCV grid", run_dmlsearch),
    ("sklearn GridSearchCV + joblib dask", run_joblib_dask),
    ("dask-ml GridSearchCV", run_dask_ml),
]


def _import_check() -> str:
    import _slow_estimator

    return str(_slow_estimator.__file__)


def measure(n_workers: int, n_trials: int, repeats: int) -> dict[str, list[float]]:
    X, y = make_classification(n_samples=400, n_features=10, random_state=0)
    cs = np.logspace(-2, 2, n_trials)
    times: dict[str, list[float]] = {name: [] for name, _ in APPROACHES}
    with local_cluster(n_workers) as client:
        warm_up_cluster(client, n_workers)
        paths = set(client.run(_import_check).values())
        print(f"[{n_workers} worker(s)] workers import _slow_estimator from {', '.join(paths)}")
        for _, fn in APPROACHES:  # untimed warm-up of each code path
            fn(client, X, y, cs[:2])
        for r in range(repeats):
            for name, fn in APPROACHES:
                with timer() as t:
                    info = fn(client, X, y, cs)
                times[name].append(t[0])
                extra = "".join(f"  {k}={v}" for k, v in info.items())
                print(
                    f"  {n_workers} worker(s)  repeat {r + 1}/{repeats}  {name:<36} "
                    f"{t[0]:7.2f} s{extra}",
                    flush=True,
                )
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 trials, 1 repeat")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    n_trials = args.trials or (12 if args.quick else 40)
    repeats = args.repeats or (1 if args.quick else 3)

    # Workers are spawned with this process's environment: let them import _slow_estimator.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
    )
    quiet_warnings()
    print_header(
        "scaling: 1 worker vs 2 workers",
        ["experiments/benchmarks/scaling.py", *sys.argv[1:]],
        n_workers="1, then a fresh cluster with 2",
    )
    sleep_total = n_trials * 2 * DELAY
    print(
        f"workload: {n_trials} trials x KFold(2) of SlowClassifier (fit sleeps {DELAY} s + "
        f"centroids), make_classification(400, 10); {sleep_total:.1f} s of fit sleep in all; "
        f"no refit; repeats={repeats}"
    )
    one = measure(1, n_trials, repeats)
    two = measure(2, n_trials, repeats)

    rows = []
    for name, _ in APPROACHES:
        t1, t2 = median(one[name]), median(two[name])
        rows.append([name, t1, t2, t1 / t2, 100 * sleep_total / t1, 100 * sleep_total / (2 * t2)])
    print(f"\n-- scaling: {n_trials} trials, medians of {repeats} repeat(s)")
    print_table(
        ["approach", "1 worker s", "2 workers s", "speedup", "sleep % 1w", "sleep % 2w"],
        rows,
    )
    dml = median(two["dmlsearch SearchCV grid"])
    for name, _ in APPROACHES[1:]:
        print(f"2 workers, {name} time / dmlsearch time: {median(two[name]) / dml:.2f}")
    print(
        "sleep % = fit sleep time / (wall time x workers): the share of the workers' time "
        "spent inside the fits' sleeps"
    )
    print_footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
