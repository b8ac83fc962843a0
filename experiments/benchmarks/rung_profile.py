"""Where a multi-fidelity search's time goes: rung steps on the workers, gaps, the driver.

Runs dmlsearch's ASHA or Hyperband search of ``multifidelity_peers.py`` (same workloads,
budget, cluster) and reads every rung step's own clock (``started``, ``finished``,
``fit_times``, ``score_times``, per worker) and the driver's time in the search's own
code (the scheduler's proposals, recording, submitting, releasing states). It prints:

* the search's wall time and how busy each worker was (idle = wall - time in steps);
* the steps' time split into fitting, scoring and the rest of a step (cloning, splitting
  the fold's rows, the state cache), for first steps and for continued ones;
* the gaps on a worker between one step's end and its next step's start (the round
  trip through the driver and the scheduler);
* the driver's seconds in each part of its own loop (each wrapped with a timer).

Usage::

    python experiments/benchmarks/rung_profile.py --workload xgb --scheduler asha --seeds 1
    python experiments/benchmarks/rung_profile.py --workload sgd --scheduler hyperband
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import fmt, local_cluster, print_footer, print_header, quiet_warnings, warm_up
from multifidelity_peers import N_FOLDS, _import_xgboost, hyperband_work, run_dml, workloads
from sklearn.model_selection import train_test_split

#: The driver-side calls timed: (object, attribute, label).
_TIMED = (
    ("dmlsearch.runner.rungs", "RungSource.propose", "scheduler proposes"),
    ("dmlsearch.runner.rungs", "RungSource.record", "record a step"),
    ("dmlsearch.runner.rungs", "RungSource.submitted", "observer: submitted"),
    ("dmlsearch.runner.loop", "WorkLoop._submit", "submit (client.submit)"),
    ("dmlsearch.runner.loop", "WorkLoop._wait_for_results", "wait for results"),
    ("dmlsearch._multifidelity", "_release", "release states (client.run)"),
)


def _timed(seconds: dict[str, float], label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[label] += time.perf_counter() - t0

    return wrapper


def instrument() -> tuple[list[Any], dict[str, float]]:
    """Collect every rung step the driver records, and time the driver's own calls."""
    import importlib

    from dmlsearch import _rung_records

    steps: list[Any] = []
    seconds: dict[str, float] = defaultdict(float)
    add = _rung_records.RungRows.add

    def keep(self: Any, result: Any, retries: int) -> None:
        steps.append(result)
        add(self, result, retries)

    _rung_records.RungRows.add = keep  # type: ignore[method-assign]
    for module_name, attr, label in _TIMED:
        module = importlib.import_module(module_name)
        owner, _, name = attr.rpartition(".")
        target = getattr(module, owner) if owner else module
        setattr(target, name, _timed(seconds, label, getattr(target, name)))
    return steps, seconds


def deeper(n: int) -> None:
    """Let the search keep ``n`` rung steps in flight (its loop's ``max_units_in_flight``)."""
    import dmlsearch.runner

    loop = dmlsearch.runner.WorkLoop

    def make(*args: Any, **kwargs: Any) -> Any:
        return loop(*args, **{**kwargs, "max_units_in_flight": n})

    dmlsearch.runner.WorkLoop = make  # type: ignore[assignment,misc]


def analyse(steps: list[Any], wall: float, driver: dict[str, float]) -> None:
    by_worker: dict[str, list[Any]] = defaultdict(list)
    for s in steps:
        by_worker[s.worker].append(s)
    print(f"  wall {wall:.2f} s, {len(steps)} steps, {len(by_worker)} workers")
    gaps: list[float] = []
    for worker, mine in sorted(by_worker.items()):
        mine.sort(key=lambda s: s.started)
        busy = sum(s.finished - s.started for s in mine)
        gaps += [b.started - a.finished for a, b in itertools.pairwise(mine)]
        print(
            f"  worker {worker}: {len(mine)} steps, busy {busy:.2f} s, "
            f"idle {wall - busy:.2f} s ({100 * (1 - busy / wall):.0f} %)"
        )
    if gaps:
        print(
            f"  gaps between a worker's steps: median {1000 * statistics.median(gaps):.1f} ms, "
            f"mean {1000 * statistics.mean(gaps):.1f} ms, sum {sum(gaps):.2f} s"
        )
    for label, group in (
        ("first steps", [s for s in steps if s.from_resource == 0]),
        ("promotions continued", [s for s in steps if s.from_resource > 0 and s.continued]),
        ("promotions refitted", [s for s in steps if s.from_resource > 0 and not s.continued]),
    ):
        if not group:
            continue
        total = sum(s.finished - s.started for s in group)
        fit = sum(sum(s.fit_times) for s in group)
        score = sum(sum(s.score_times) for s in group)
        print(
            f"  {label}: {len(group)} steps, {total:.2f} s in steps: fit {fit:.2f} s "
            f"({100 * fit / total:.0f} %), score {score:.2f} s ({100 * score / total:.0f} %), "
            f"rest {total - fit - score:.2f} s; work {sum(s.work for s in group):.0f} units/fold"
        )
    print("  driver seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in driver.items()))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="xgb", choices=("sgd", "xgb"))
    parser.add_argument("--scheduler", default="asha", choices=("asha", "hyperband"))
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument(
        "--one-split",
        action="store_true",
        help="Optuna's one held-out split instead of cv=3 (dml-asha-1split, dml-hb-1split)",
    )
    parser.add_argument("--sgd-R", type=int, default=27)
    parser.add_argument("--xgb-R", type=int, default=27)
    parser.add_argument("--xgb-rows", type=int, default=50_000)
    parser.add_argument(
        "--in-flight",
        type=int,
        default=None,
        help="rung steps in flight (default: the search's own, one per worker thread)",
    )
    args = parser.parse_args(argv)
    quiet_warnings()
    print_header("where a multi-fidelity search's time goes (rung steps, gaps, driver)", sys.argv)
    w = workloads(args)[args.workload]
    budget = hyperband_work(w.R) * N_FOLDS * w.fold_rows()
    kind = ("dml-asha" if args.scheduler == "asha" else "dml-hb") + (
        "-1split" if args.one_split else ""
    )
    steps, driver = instrument()
    if args.in_flight is not None:
        deeper(args.in_flight)
    print(f"rung steps in flight: {args.in_flight or 'the search default'}")
    with local_cluster(2) as client:
        warm_up(client, 2)
        client.run(_import_xgboost)
        for seed in range(args.seeds):
            data = tuple(
                train_test_split(w.X, w.y, test_size=0.25, stratify=w.y, random_state=seed)
            )
            steps.clear()
            driver.clear()
            out = run_dml(kind, w, data, seed, client, budget)
            print(
                f"{args.workload} {kind} seed {seed}: best val {fmt(out['val'], 4)}, "
                f"{out['trials']} trials, {out['native']}, {out['note']}"
            )
            analyse(list(steps), out["wall"], dict(driver))
    print(f"numpy {np.__version__}")
    print_footer()


if __name__ == "__main__":
    main(sys.argv[1:])
