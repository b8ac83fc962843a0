"""dmlsearch.optimize vs Optuna on the same trees: the engines' cost, not the pruners'.

What is measured
    ``--configs`` (60) xgboost configurations drawn once (seed 0) from
    ``multifidelity_peers.py``'s xgb space, each trained ``--rounds`` (27) boosting rounds
    by ``xgboost.train`` on that workload's one-split training part (25,000 rows, 20
    features, ``nthread=1``), with the validation error evaluated after every round and
    reported (``trial.report``), then the pruning question asked (``should_prune`` /
    ``should_stop``), as an Optuna user writes it. Nothing is pruned (Optuna's
    ``NopPruner``; dmlsearch without a scheduler, and with ``scheduler="asha"`` whose
    first rung is the last, ``min_resource = max_resource = rounds``), so every contender
    trains exactly the same trees; the wall time differs only by how each engine runs the
    trials and carries their reports.
      optuna       ``study.optimize(n_jobs=2)``: two threads in this process, in-memory
                   storage;
      dml          ``dmlsearch.optimize(scheduler=None)`` on a ``LocalCluster`` of 2
                   single-thread worker processes;
      dml-asha     the same with ``scheduler="asha"`` (a pruner attached: stop Events,
                   one trial a task).
    Each round runs the three in turn (a rotating order); reported: each round's seconds,
    the medians and the median of the per-round ratios to Optuna, and the CPU seconds of
    this process (Optuna's threads; for dmlsearch the scheduler and the driver) and of
    the workers in the last round.

Rerun
    python experiments/benchmarks/optimize_vs_optuna.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from typing import Any

import numpy as np
import psutil
from _common import local_cluster, print_footer, print_header, quiet_warnings
from multifidelity_peers import train_rounds, workloads
from sklearn.model_selection import train_test_split


def draw_configs(n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    return [
        {
            "learning_rate": float(np.exp(rng.uniform(np.log(0.01), np.log(0.5)))),
            "max_depth": int(rng.integers(2, 9)),
            "subsample": float(rng.uniform(0.5, 1.0)),
            "colsample_bytree": float(rng.uniform(0.5, 1.0)),
            "min_child_weight": float(np.exp(rng.uniform(0.0, np.log(50.0)))),
        }
        for _ in range(n)
    ]


def run_optuna(split: tuple[Any, ...], configs: list[dict[str, Any]], rounds: int) -> float:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    local = threading.local()

    def objective(trial: Any) -> float:
        if not hasattr(local, "cache"):
            local.cache = {}
        params = configs[trial.number]
        return train_rounds(local.cache, split, params, rounds, trial.report, trial.should_prune)

    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    t0 = time.perf_counter()
    study.optimize(objective, n_trials=len(configs), n_jobs=2)
    return time.perf_counter() - t0


def run_dml(
    client: Any,
    split: tuple[Any, ...],
    configs: list[dict[str, Any]],
    rounds: int,
    scheduler: str | None,
) -> float:
    import dmlsearch
    from dmlsearch import Int

    cache: dict[str, Any] = {}  # the objective reaches each worker once: one per worker

    def objective(params: dict[str, Any], trial: Any) -> float:
        config = configs[params["i"]]
        return train_rounds(cache, split, config, rounds, trial.report, trial.should_stop)

    bounds = {"min_resource": rounds, "max_resource": rounds} if scheduler else {}
    t0 = time.perf_counter()
    dmlsearch.optimize(
        objective,
        {"i": Int(0, len(configs) - 1)},
        strategy="grid",
        n_trials=len(configs),
        scheduler=scheduler,
        client=client,
        dashboard=False,
        **bounds,
    )
    return time.perf_counter() - t0


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--configs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=27)
    args = parser.parse_args(argv)
    quiet_warnings()
    print_header("dmlsearch.optimize vs Optuna on the same xgboost trees", sys.argv)
    w = workloads(argparse.Namespace(xgb_rows=50_000, sgd_R=27, xgb_R=args.rounds))["xgb"]
    X_train, _, y_train, _ = train_test_split(
        w.X, w.y, test_size=0.25, stratify=w.y, random_state=0
    )
    split = tuple(
        train_test_split(X_train, y_train, test_size=1 / 3, stratify=y_train, random_state=0)
    )
    configs = draw_configs(args.configs)
    me = psutil.Process()
    names = ("optuna", "dml", "dml-asha")
    seconds: dict[str, list[float]] = {k: [] for k in names}
    with local_cluster(2) as client:
        client.run(lambda: __import__("xgboost"))
        run_dml(client, split, configs[:4], 2, None)  # warm: the objective's first trip
        for rep in range(args.repeats):
            order = names[rep % 3 :] + names[: rep % 3]
            cpu: dict[str, str] = {}
            for name in order:
                here = sum(me.cpu_times()[:2])
                there = client.run(lambda: sum(psutil.Process().cpu_times()[:2]))
                if name == "optuna":
                    wall = run_optuna(split, configs, args.rounds)
                else:
                    scheduler = "asha" if name == "dml-asha" else None
                    wall = run_dml(client, split, configs, args.rounds, scheduler)
                seconds[name].append(wall)
                after = client.run(lambda: sum(psutil.Process().cpu_times()[:2]))
                workers = sum(after[k] - there[k] for k in after)
                cpu[name] = (
                    f"{name} {wall:.2f} s (CPU s: this process "
                    f"{sum(me.cpu_times()[:2]) - here:.2f}, workers {workers:.2f})"
                )
            print(f"round {rep}: " + "; ".join(cpu[k] for k in names), flush=True)
    print()
    print(f"{args.configs} configurations x {args.rounds} rounds, {args.repeats} rounds")
    for name in names:
        ratios = [d / o for d, o in zip(seconds[name], seconds["optuna"], strict=True)]
        print(
            f"{name:9s} median {statistics.median(seconds[name]):.2f} s, "
            f"/ optuna: paired median {statistics.median(ratios):.3f} "
            f"({' '.join(f'{r:.2f}' for r in ratios)})"
        )
    print_footer()


if __name__ == "__main__":
    main(sys.argv[1:])
