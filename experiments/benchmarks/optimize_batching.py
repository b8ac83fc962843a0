"""Tiny objectives through ``dmlsearch.optimize``: packed several to a task vs one per task,
beside the hand-written peer, plain Dask ``client.map`` over the same parameter sets.

    python experiments/benchmarks/optimize_batching.py [N_TRIALS (default 1000)] [REPS (3)]

A 2-worker, 1-thread LocalCluster of processes; a quadratic objective that takes
microseconds, so what is measured is the per-trial overhead. Prints the medians of REPS
runs of each mode (interleaved) and their ratios.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import numpy as np
from distributed import Client, LocalCluster

import dmlsearch._optimize as optimize_module
from dmlsearch import Float, optimize


def objective(params: dict[str, Any], trial: Any) -> float:
    return -((params["x"] - 1.0) ** 2)


def plain(x: float) -> float:
    return -((x - 1.0) ** 2)


_POLICY = optimize_module.UnitPolicy


def _one_per_task(**kwargs: Any) -> Any:
    # What optimize did before it packed trials without a pruner.
    return _POLICY(**{**kwargs, "batchable": False})


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print(f"command: python experiments/benchmarks/optimize_batching.py {n} {reps}")
    print(
        f"date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; machine: "
        f"{os.uname().nodename}, {os.cpu_count()} cores, load {os.getloadavg()}"
    )
    space = {"x": Float(-3.0, 3.0)}
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True)
    with cluster, Client(cluster) as client:
        optimize(objective, space, n_trials=50, client=client, random_state=0)  # warm
        times: dict[str, list[float]] = {"batched": [], "one per task": [], "client.map": []}
        for rep in range(reps):
            for mode in times:
                start = time.perf_counter()
                if mode == "client.map":
                    xs = np.random.default_rng(rep).uniform(-3.0, 3.0, n).tolist()
                    values = client.gather(client.map(plain, xs, pure=False))
                    assert len(values) == n
                else:
                    optimize_module.UnitPolicy = (
                        _one_per_task if mode == "one per task" else _POLICY
                    )
                    result = optimize(objective, space, n_trials=n, client=client,
                                      random_state=rep)  # fmt: skip
                    optimize_module.UnitPolicy = _POLICY
                    assert len(result.trials) == n
                times[mode].append(time.perf_counter() - start)
    medians = {mode: statistics.median(ts) for mode, ts in times.items()}
    for mode, ts in times.items():
        print(
            f"{mode:>13}: median {medians[mode]:.2f} s ({n / medians[mode]:.0f} trials/s); "
            f"runs {[round(t, 2) for t in ts]}"
        )
    print(f"one per task / batched: {medians['one per task'] / medians['batched']:.2f}x")
    print(f"client.map / batched: {medians['client.map'] / medians['batched']:.2f}x")


if __name__ == "__main__":
    main()
