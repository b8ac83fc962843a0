"""Worker loss during a bagging fit and an ASHA search: SIGKILL a random worker every 5 s.

What is measured
    ``--workload bagging``: ``dmlsearch.ensemble.BaggingClassifier`` of ``--members``
    (default 240) members of ``LoggingSleepy`` (sleeps ``--member-seconds``, 0.25 s) on
    2 single-thread worker processes with nannies (``dmlsearch.testing.local_cluster(2)``,
    a fresh cluster per run), ``random_state=0``.

    ``--workload asha``: ``SearchCV(scheduler="asha", resource="partial_fit")`` of
    ``--trials`` (default 90) random trials of ``LoggingSGD`` (an ``SGDClassifier``) on
    ``--rows`` (default 20 000) x 40 synthetic rows, ``cv=3``, 1 to 27 epochs, factor 3,
    recording into a SQLite registry, on the same kind of cluster.

    A *faulty* run has a thread SIGKILL a random live worker every ``--kill-every``
    seconds (default 5) from the start of ``fit`` (``worker_loss.Killer``); a *clean* run
    has none. Faulty and clean runs alternate, ``--repeats`` each, in one invocation.

    Checked per run: bagging: the fit completes (no member given up), ``n_estimators``
    members, each fitted member's seed once, and the same members and ``predict_proba``
    as the clean run of the same repeat. ASHA: every trial and every (trial, resource)
    step once in ``cv_results_``, every trial once in the registry, every step
    ``complete``. Counted: kills; extra runs (bagging: a member fitted by more than one
    worker process; ASHA: an epoch of a trial trained by more than one worker process,
    which also counts a promotion refitted from scratch because its state died with its
    worker); the loop's ``runner_stats_`` (resubmitted units, solo probes); ASHA: steps
    that could not continue from a kept state ("refitted promotions"), and those that
    continued from the state store's copy (``SearchCV(state_store=...)``: ``--state-store
    auto``, the default, copies to the registry's artifact store; ``off`` keeps states
    only in worker memory) with the seconds the store took per step. Timed: ``fit``'s
    wall time (medians).

Rerun
    python experiments/reliability/worker_loss_units.py                      # both, 2 + 2 runs each
    python experiments/reliability/worker_loss_units.py --workload bagging --repeats 1
    python experiments/reliability/worker_loss_units.py --workload asha --trials 300 \
        --rows 80000 --state-store off                    # states in worker memory only
    # the same with Dask's Active Memory Manager off:
    # DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__START=False python ... --workload asha
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import dask
import numpy as np
from _common import median, print_footer, print_header, print_table, quiet_warnings
from distributed import Client
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier
from worker_loss import Killer

from dmlsearch import Float, Registry, SearchCV
from dmlsearch.ensemble import BaggingClassifier
from dmlsearch.testing import SleepyClassifier, local_cluster

#: Workers append ``<unit> <pid>`` lines here. An environment variable, since workers fork
#: from a fork server started once, with the first cluster, from this process's environment.
LOG_ENV = "DMLSEARCH_WORKER_LOSS_LOG"


def _log(line: str) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="ascii") as f:
            f.write(f"{line} {os.getpid()}\n")


class LoggingSleepy(SleepyClassifier):
    """A ``SleepyClassifier`` with a ``random_state`` (set per member) that logs each fit."""

    def __init__(self, seconds: float = 0.0, random_state: int | None = None) -> None:
        super().__init__(seconds=seconds)
        self.random_state = random_state

    def fit(self, X: Any, y: Any) -> LoggingSleepy:
        _log(f"{self.random_state}")
        return super().fit(X, y)  # type: ignore[return-value]


class LoggingSGD(SGDClassifier):
    """An ``SGDClassifier`` that logs each epoch (``partial_fit`` call) of each trial."""

    def partial_fit(self, X: Any, y: Any, *args: Any, **kwargs: Any) -> LoggingSGD:
        self.epochs_logged_ = getattr(self, "epochs_logged_", 0) + 1
        _log(f"{self.alpha!r}/{self.eta0!r}/{self.epochs_logged_}")
        return super().partial_fit(X, y, *args, **kwargs)  # type: ignore[no-any-return]


def _fits(path: str) -> dict[str, set[int]]:
    """Unit -> the worker processes that ran it."""
    out: dict[str, set[int]] = defaultdict(set)
    if os.path.exists(path):
        with open(path, encoding="ascii") as f:
            for line in f:
                unit, pid = line.split()
                out[unit].add(int(pid))
    return out


def bagging(args: argparse.Namespace, client: Client, tmp: str, name: str) -> dict[str, Any]:
    X, y = make_classification(n_samples=200, n_features=8, random_state=0)
    bag = BaggingClassifier(
        LoggingSleepy(seconds=args.member_seconds),
        n_estimators=args.members,
        max_features=0.5,
        random_state=0,
        client=client,
    )
    t0 = time.perf_counter()
    bag.fit(X, y)
    wall = time.perf_counter() - t0
    seeds = [int(e.random_state) for e in bag.estimators_]
    fits = _fits(os.environ[LOG_ENV])
    return {
        "wall": wall,
        "once": len(seeds) == args.members
        and len(set(seeds)) == args.members
        and set(fits) == {str(s) for s in seeds},
        "all_ok": True,  # a member given up raises MemberLostError: the run would end
        "extra_runs": sum(len(p) - 1 for p in fits.values()),
        "stats": bag.runner_stats_,
        "signature": (
            seeds,
            [f.tolist() for f in bag.estimators_features_],
            bag.predict_proba(X).tolist(),
        ),
        "refits": 0,
    }


def asha(args: argparse.Namespace, client: Client, tmp: str, name: str) -> dict[str, Any]:
    X, y = make_classification(n_samples=args.rows, n_features=40, n_informative=10, random_state=0)
    registry = Registry(f"sqlite:///{tmp}/registry.db", artifacts=os.path.join(tmp, "art"))
    search = SearchCV(
        LoggingSGD(random_state=0),
        {
            "alpha": Float(1e-6, 1e-1, log=True),
            "eta0": Float(1e-3, 1.0, log=True),
            "learning_rate": ["optimal", "adaptive"],
        },
        n_trials=args.trials,
        scheduler="asha",
        resource="partial_fit",
        min_resource=1,
        max_resource=27,
        reduction_factor=3,
        cv=3,
        random_state=0,
        client=client,
        registry=registry,
        experiment_name=name,
        state_store="auto" if args.state_store == "auto" else False,
        refit=False,
        progress=False,
        dashboard=False,
    )
    t0 = time.perf_counter()
    search.fit(X, y)
    wall = time.perf_counter() - t0
    r = search.cv_results_
    steps = list(zip(r["trial"].tolist(), r["n_resources"].tolist(), strict=True))
    trials = sorted(set(r["trial"].tolist()))
    recorded = sorted(registry.trials(name)["number"].tolist())
    registry.close()
    fits = _fits(os.environ[LOG_ENV])
    first = min(r["n_resources"].tolist())
    return {
        "wall": wall,
        "once": len(steps) == len(set(steps))
        and trials == list(range(args.trials))
        and recorded == trials,
        "all_ok": all(t.state == "complete" for t in search.trials_),
        "extra_runs": sum(len(p) - 1 for p in fits.values()),
        "stats": search.runner_stats_,
        "signature": None,
        "refits": sum(
            1
            for res, cont in zip(r["n_resources"].tolist(), r["continued"].tolist(), strict=True)
            if res > first and not cont
        ),
        "from_store": int(np.sum(r["from_store"])),
        "store_ms": 1000 * sum(t.store_time for t in search.trials_) / len(steps),
        "steps": len(steps),
    }


WORKLOADS: dict[str, Callable[[argparse.Namespace, Client, str, str], dict[str, Any]]] = {
    "bagging": bagging,
    "asha": asha,
}


def one_run(args: argparse.Namespace, workload: str, faulty: bool, seed: int) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix=f"dmlsearch-worker-loss-{workload}-")
    log = os.environ[LOG_ENV]
    if os.path.exists(log):
        os.remove(log)
    cluster = local_cluster(2)
    try:
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(2)
            client.run(quiet_warnings)
            killer = Killer(client, args.kill_every, seed)
            if faulty:
                killer.start()
            try:
                out = WORKLOADS[workload](
                    args, client, tmp, f"{workload}-{'faulty' if faulty else 'clean'}-{seed}"
                )
            finally:
                killer.stop.set()
    finally:
        cluster.close()
    out["kills"] = len(killer.kills)
    out["faulty"] = faulty
    return out


def _report(workload: str, results: list[dict[str, Any]]) -> None:
    faulty = [r for r in results if r["faulty"]]
    clean = [r for r in results if not r["faulty"]]

    def col(key: str, runs: list[dict[str, Any]]) -> float:
        return median([float(r[key]) for r in runs])

    def stat(key: str, runs: list[dict[str, Any]]) -> float:
        return median([float(getattr(r["stats"], key)) for r in runs])

    rows: list[list[Any]] = [
        ["median wall (s)", col("wall", faulty), col("wall", clean)],
        ["median kills", col("kills", faulty), 0],
        ["median extra runs", col("extra_runs", faulty), col("extra_runs", clean)],
        ["max extra runs - kills", max(r["extra_runs"] - r["kills"] for r in faulty), ""],
        [
            "median resubmitted",
            stat("resubmitted_trials", faulty),
            stat("resubmitted_trials", clean),
        ],
        ["median probes", stat("probes", faulty), stat("probes", clean)],
        ["median rescattered", stat("rescattered", faulty), stat("rescattered", clean)],
        [
            "all exactly once, none failed",
            str(all(r["once"] and r["all_ok"] for r in faulty)),
            str(all(r["once"] and r["all_ok"] for r in clean)),
        ],
    ]
    if workload == "asha":
        rows.append(["median refitted promotions", col("refits", faulty), col("refits", clean)])
        rows.append(
            ["median promotions from store", col("from_store", faulty), col("from_store", clean)]
        )
        rows.append(["median store ms per step", col("store_ms", faulty), col("store_ms", clean)])
    else:
        rows.append(
            ["same members and predictions as clean", str(all(r.get("same") for r in faulty)), ""]
        )
    print(f"\n{workload}:")
    print_table(["", "faulty", "clean"], rows)
    mf, mc = col("wall", faulty), col("wall", clean)
    print(f"{workload}: wall-time ratio faulty/clean (medians): {mf / mc:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["bagging", "asha", "both"], default="both")
    parser.add_argument("--members", type=int, default=240)
    parser.add_argument("--member-seconds", type=float, default=0.25)
    parser.add_argument("--trials", type=int, default=90)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--kill-every", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--state-store", choices=["auto", "off"], default="auto")
    args = parser.parse_args()
    os.environ[LOG_ENV] = os.path.join(tempfile.mkdtemp(prefix="dmlsearch-fits-"), "fits.log")
    quiet_warnings()
    print_header("worker loss during a bagging fit and an ASHA search", sys.argv, 2)
    print(
        f"bagging: {args.members} members sleeping {args.member_seconds} s each; asha: "
        f"{args.trials} trials of SGDClassifier on {args.rows} x 40 rows, cv=3, 1..27 epochs, "
        f"factor 3, SQLite registry, state_store {args.state_store}; a random live worker "
        f"SIGKILLed every {args.kill_every} s "
        "in faulty runs; faulty and clean runs alternate; nanny: dmlsearch WarmNanny; "
        "Active Memory Manager on: "
        f"{dask.config.get('distributed.scheduler.active-memory-manager.start')}"
    )
    workloads = ["bagging", "asha"] if args.workload == "both" else [args.workload]
    for workload in workloads:
        results = []
        for i in range(args.repeats):
            pair = {faulty: one_run(args, workload, faulty, seed=i) for faulty in (True, False)}
            pair[True]["same"] = pair[True]["signature"] == pair[False]["signature"]
            for faulty in (True, False):
                r = pair[faulty]
                results.append(r)
                s = r["stats"]
                print(
                    f"{workload} run {i} {'faulty' if faulty else 'clean '}: wall {r['wall']:.2f} s, "
                    f"kills {r['kills']}, extra runs {r['extra_runs']}, resubmitted "
                    f"{s.resubmitted_trials}, probes {s.probes}, rescattered {s.rescattered}, "
                    f"tasks {s.submitted_tasks}, refitted promotions {r['refits']}, "
                    + (
                        f"from store {r['from_store']}, store {r['store_ms']:.2f} ms/step, "
                        if workload == "asha"
                        else ""
                    )
                    + f"exactly once {r['once']}, none failed {r['all_ok']}"
                    + (f", same as clean {r['same']}" if faulty and workload == "bagging" else "")
                )
                sys.stdout.flush()
        _report(workload, results)
    print(f"\nfinished: {np.datetime64('now')}")
    print_footer()


if __name__ == "__main__":
    main()
