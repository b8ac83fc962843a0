"""ASHA vs random search at full budget vs scikit-learn's HalvingRandomSearchCV, one run.

What is measured
    ``SGDClassifier(random_state=0)`` trained by epochs on scikit-learn's digits (pixels /
    16), a stratified 75/25 split per seed; search space: ``alpha`` log-uniform in
    [1e-6, 1e-1], ``loss`` in {hinge, log_loss, modified_huber}, ``penalty`` in {l2, l1,
    elasticnet}; ``cv=3`` on the 75 %, the best model refitted on the 75 % and scored on
    the 25 % (held-out accuracy). Budgets go up to R = ``--max-resource`` epochs (27),
    eta = 3, from 1 epoch. Contenders, each with ``--trials`` candidates (81):
      (random) dmlsearch random search at full budget: every trial trained to R epochs
               (``SuccessiveHalving(R, R)``: one rung, the same ``partial_fit`` training
               code as ASHA's);
      (asha)   dmlsearch ``scheduler="asha"``, ``resource="partial_fit"``, the same random
               candidates (same seed);
      (asha@1/3) ASHA given a third of random's budget (``ASHA(max_total_resource=
               trials * R // 3)``) and as many random candidates as that budget starts;
      (asha3@1/3) the same from 3 epochs (``ASHA(3, R, 3, ...)``: rungs 3, 9, 27), added
               2026-12-03: on this task the 1-epoch cv score ranks the trials poorly
               (Spearman with the 27-epoch cv score over 81 random candidates, seeds 0 and
               1: 0.22 and 0.41 at 1 epoch, 0.67 and 0.50 at 3, 0.79 and 0.71 at 9; of the
               10 best at 27 epochs, 6 and 3 rank below the top third at 1 epoch, where
               ASHA's first rung drops them);
      (halving) scikit-learn ``HalvingRandomSearchCV(resource="max_iter", min_resources=1,
               max_resources=R, factor=3)`` on ``SGDClassifier(tol=None)``, ``n_jobs=2``,
               with the number of candidates whose budget is closest to ASHA's median
               budget (``--halving-candidates`` overrides it).
    Budget: epochs trained over the whole search, per fold (dmlsearch's ``total_work_``,
    counted on the workers: a promoted trial only adds epochs; scikit-learn's
    ``sum(n_candidates_ * n_resources_)``: each iteration refits from scratch); the refit is
    left out. Seeds 0..``--seeds``-1 (5), dmlsearch contenders in a rotating order per seed,
    scikit-learn's right after ASHA; reported: per
    seed, and the medians.

    ``--workload xgb`` (added 2026-12-08) runs the same contenders on xgboost boosting
    rounds instead: ``multifidelity_peers.py``'s xgb workload (``XGBClassifier(tree_method=
    "hist", n_jobs=1)`` on ``make_classification(50,000 rows)``, its space of
    ``learning_rate``, ``max_depth``, ``subsample``, ``colsample_bytree``,
    ``min_child_weight``), ``resource="n_estimators"`` (a promoted trial boosts on from its
    booster), scikit-learn's halving with ``resource="n_estimators"``.

Rerun
    python experiments/benchmarks/multifidelity.py             # 5 seeds, 81 trials, R=27
    python experiments/benchmarks/multifidelity.py --quick     # 2 seeds, 27 trials, R=9
    python experiments/benchmarks/multifidelity.py --workload xgb
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from _common import (
    fmt,
    local_cluster,
    print_footer,
    print_header,
    print_table,
    quiet_warnings,
    warm_up,
)
from multifidelity_peers import _import_xgboost
from scipy.stats import loguniform
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.experimental import enable_halving_search_cv  # noqa: F401
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import HalvingRandomSearchCV, train_test_split

from dmlsearch import Categorical, Float, SearchCV
from dmlsearch.schedulers import ASHA, SuccessiveHalving

SPACE = {
    "alpha": Float(1e-6, 1e-1, log=True),
    "loss": Categorical(["hinge", "log_loss", "modified_huber"]),
    "penalty": Categorical(["l2", "l1", "elasticnet"]),
}
SK_SPACE = {
    "alpha": loguniform(1e-6, 1e-1),
    "loss": ["hinge", "log_loss", "modified_huber"],
    "penalty": ["l2", "l1", "elasticnet"],
}


def halving_budget(n_candidates: int, R: int, eta: int = 3) -> int:
    """scikit-learn's budget for ``n_candidates`` (its own schedule, min_resources=1)."""
    possible = 1 + int(np.floor(np.log(R) / np.log(eta) + 1e-9))
    required = 1 + int(np.floor(np.log(n_candidates) / np.log(eta) + 1e-9))
    n = n_candidates
    total = 0
    for i in range(min(possible, required)):
        total += n * eta**i
        n = int(np.ceil(n / eta))
    return total


@dataclass(frozen=True)
class Task:
    """What is searched: the estimator, its spaces and what the budget counts."""

    X: np.ndarray
    y: np.ndarray
    estimator: Any
    space: dict[str, Any]
    sk_estimator: Any
    sk_space: dict[str, Any]
    resource: str
    sk_resource: str
    unit: str


def make_task(workload: str) -> Task:
    if workload == "sgd":
        X, y = load_digits(return_X_y=True)
        return Task(
            X / 16.0,
            y,
            SGDClassifier(random_state=0),
            SPACE,
            SGDClassifier(random_state=0, tol=None),
            SK_SPACE,
            "partial_fit",
            "max_iter",
            "epochs",
        )
    from multifidelity_peers import dml_space, scipy_space, workloads

    w = workloads(argparse.Namespace(xgb_rows=50_000, sgd_R=27, xgb_R=27))["xgb"]
    return Task(
        w.X,
        w.y,
        w.estimator,
        dml_space(w.dims),
        w.estimator,
        scipy_space(w.dims),
        w.dml_resource,
        w.sk_resource,
        "rounds",
    )


def run_dml(
    client: Any, kind: str, task: Task, data: tuple[Any, ...], seed: int, args: Any
) -> dict[str, Any]:
    X_train, X_test, y_train, y_test = data
    R = args.max_resource
    n_trials = args.trials
    scheduler: Any = "asha"
    bounds = {"min_resource": 1, "max_resource": R}
    if kind == "random":
        scheduler, bounds = SuccessiveHalving(R, R, 3, args.trials), {}
    elif kind in ("asha@1/3", "asha3@1/3"):
        # As many trials as a third of random's budget allows (counted as ASHA counts it).
        n_trials, bounds = 20 * args.trials, {}
        r0 = 1 if kind == "asha@1/3" else 3
        scheduler = ASHA(r0, R, 3, max_total_resource=args.trials * R // 3)
    search = SearchCV(
        clone(task.estimator),
        task.space,
        strategy="random",
        n_trials=n_trials,
        scheduler=scheduler,
        resource=task.resource,
        cv=3,
        random_state=seed,
        client=client,
        progress=False,
        dashboard=False,
        **bounds,
    )
    t0 = time.perf_counter()
    search.fit(X_train, y_train)
    wall = time.perf_counter() - t0 - search.phase_times_.get("refit", 0.0)
    return {
        "budget": search.total_work_,
        "test": search.score(X_test, y_test),
        "cv": search.best_score_,
        "wall": wall,
        "trials": len(search.history_),
        "top": search.n_candidates_[-1],
    }


def run_halving(
    task: Task, data: tuple[Any, ...], seed: int, n_candidates: int, R: int
) -> dict[str, Any]:
    X_train, X_test, y_train, y_test = data
    search = HalvingRandomSearchCV(
        clone(task.sk_estimator),
        task.sk_space,
        n_candidates=n_candidates,
        resource=task.sk_resource,
        min_resources=1,
        max_resources=R,
        factor=3,
        cv=3,
        random_state=seed,
        n_jobs=2,
    )
    t0 = time.perf_counter()
    search.fit(X_train, y_train)
    wall = time.perf_counter() - t0 - search.refit_time_
    budget = sum(n * r for n, r in zip(search.n_candidates_, search.n_resources_, strict=True))
    return {
        "budget": float(budget),
        "test": search.score(X_test, y_test),
        "cv": search.best_score_,
        "wall": wall,
        "trials": n_candidates,
        "top": search.n_candidates_[-1],
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=81)
    parser.add_argument("--max-resource", type=int, default=27)
    parser.add_argument("--halving-candidates", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workload", default="sgd", choices=("sgd", "xgb"))
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.trials, args.max_resource = 2, 27, 9
    quiet_warnings()
    print_header(
        "multi-fidelity search: ASHA vs random at full budget vs sklearn halving", sys.argv
    )
    task = make_task(args.workload)
    X, y = task.X, task.y
    print(f"workload: {args.workload} (budget in {task.unit} per fold)")
    runs: dict[str, list[dict[str, Any]]] = {
        "random": [],
        "asha": [],
        "halving": [],
        "asha@1/3": [],
        "asha3@1/3": [],
    }
    with local_cluster(2) as client:
        warm_up(client, 2)
        if args.workload == "xgb":
            client.run(_import_xgboost)
        for seed in range(args.seeds):
            data = tuple(train_test_split(X, y, test_size=0.25, stratify=y, random_state=seed))
            # Which runs first alternates; scikit-learn's halving follows ASHA (its number
            # of candidates is sized on ASHA's budget).
            kinds = ["random", "asha", "asha@1/3", "asha3@1/3"]
            for kind in kinds[seed % 4 :] + kinds[: seed % 4]:
                runs[kind].append(run_dml(client, kind, task, data, seed, args))
                if kind == "asha":
                    n = _n_halving(args, runs)
                    runs["halving"].append(run_halving(task, data, seed, n, args.max_resource))
            print(f"seed {seed} done", file=sys.stderr)
    _report(runs, args)
    print_footer()


def _n_halving(args: Any, runs: dict[str, list[dict[str, Any]]]) -> int:
    """Candidates giving scikit-learn's halving the budget closest to ASHA's (median so far)."""
    if args.halving_candidates is not None:
        return int(args.halving_candidates)
    target = statistics.median(r["budget"] for r in runs["asha"])
    return min(
        range(3, 4 * args.trials), key=lambda n: abs(halving_budget(n, args.max_resource) - target)
    )


def _report(runs: dict[str, list[dict[str, Any]]], args: Any) -> None:
    full = [r["budget"] for r in runs["random"]]
    rows = []
    for kind, results in runs.items():
        for seed, r in enumerate(results):
            rows.append(
                [
                    f"{kind} seed {seed}",
                    r["trials"],
                    r["top"],
                    fmt(r["budget"], 0),
                    f"{r['budget'] / full[seed]:.3f}",
                    f"{r['cv']:.4f}",
                    f"{r['test']:.4f}",
                    fmt(r["wall"], 1),
                ]
            )
    headers = [
        "run",
        "trials",
        "at top",
        "budget / fold",
        "/ random",
        "best cv",
        "held-out acc",
        "search s",
    ]
    print_table(headers, rows)
    print()
    medians = []
    for kind, results in runs.items():
        ratio = [r["budget"] / f for r, f in zip(results, full, strict=True)]
        medians.append(
            [
                kind,
                fmt(statistics.median(r["budget"] for r in results), 0),
                f"{statistics.median(ratio):.3f}",
                f"{statistics.median(r['cv'] for r in results):.4f}",
                f"{statistics.median(r['test'] for r in results):.4f}",
                fmt(statistics.median(r["wall"] for r in results), 1),
            ]
        )
    print(
        f"medians over {len(full)} seeds ({args.trials} candidates, R={args.max_resource}, eta=3):"
    )
    print_table(["contender", "budget", "/ random", "best cv", "held-out acc", "search s"], medians)


if __name__ == "__main__":
    main(sys.argv[1:])
