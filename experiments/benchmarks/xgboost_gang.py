"""xgboost on a 2-worker gang (xgboost.dask) vs single-process xgboost, side by side.

What is measured
    (1) Quality and time of one model: ``make_classification(n_samples=ROWS, n_features=20,
        n_informative=10, random_state=0)`` (``--rows``, default 100,000), ``KFold(3,
        shuffle=True, random_state=0)``, ``XGBClassifier(n_estimators=200, max_depth=6,
        learning_rate=0.1, tree_method="hist", random_state=0)``:
          (p) single process: ``cross_val_score(..., scoring="roc_auc")`` with ``n_jobs=1``
              (the workers below have one thread each);
          (g) dmlsearch ``SearchCV(workers_per_trial=2)`` with that one candidate: each
              fold trained by xgboost.dask on a gang of the 2 workers, one part each.
        Reported: the mean AUC over the folds of each, their difference, and wall time.
    (2) Throughput of a search: 8 candidates (``max_depth`` 3..10, ``n_estimators=100``) on
        the first ``--search-rows`` rows (default 30,000), ``cv=2``, ``scoring="roc_auc"``:
          (t1) ``workers_per_trial=1``: 2 one-worker trials at a time;
          (t2) ``workers_per_trial=2``: 1 two-worker trial at a time.
        Reported: trials per minute and the best AUC of each.
    ``--repeats`` runs of each, interleaved (order rotating); medians.

Rerun
    python experiments/benchmarks/xgboost_gang.py            # 100,000 rows, 3 repeats
    python experiments/benchmarks/xgboost_gang.py --quick    # 10,000 rows, 1 repeat
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np
from _common import fmt, local_cluster, print_footer, print_header, print_table, quiet_warnings
from sklearn.datasets import make_classification
from sklearn.model_selection import KFold, cross_val_score
from xgboost import XGBClassifier

from dmlsearch import SearchCV

PARAMS: dict[str, Any] = dict(
    n_estimators=200, max_depth=6, learning_rate=0.1, tree_method="hist", random_state=0
)


def single(X: Any, y: Any, cv: Any) -> tuple[float, float]:
    start = time.perf_counter()
    scores = cross_val_score(XGBClassifier(**PARAMS, n_jobs=1), X, y, cv=cv, scoring="roc_auc")
    return time.perf_counter() - start, float(np.mean(scores))


def gang(client: Any, X: Any, y: Any, cv: Any) -> tuple[float, float]:
    start = time.perf_counter()
    search = SearchCV(
        XGBClassifier(**PARAMS),
        {"max_depth": [PARAMS["max_depth"]]},
        strategy="grid",
        cv=cv,
        scoring="roc_auc",
        workers_per_trial=2,
        refit=False,
        client=client,
        progress=False,
        dashboard=False,
    ).fit(X, y)
    return time.perf_counter() - start, float(search.best_score_)


def throughput(client: Any, X: Any, y: Any, k: int) -> tuple[float, float]:
    start = time.perf_counter()
    search = SearchCV(
        XGBClassifier(n_estimators=100, tree_method="hist", random_state=0),
        {"max_depth": list(range(3, 11))},
        strategy="grid",
        cv=2,
        scoring="roc_auc",
        workers_per_trial=k,
        refit=False,
        client=client,
        progress=False,
        dashboard=False,
    ).fit(X, y)
    minutes = (time.perf_counter() - start) / 60
    return len(search.trials_) / minutes, float(search.best_score_)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--search-rows", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.search_rows, args.repeats = 10_000, 5_000, 1
    quiet_warnings()
    print_header("xgboost on a 2-worker gang vs single-process xgboost", sys.argv)
    X, y = make_classification(n_samples=args.rows, n_features=20, n_informative=10, random_state=0)
    cv = KFold(3, shuffle=True, random_state=0)
    Xs, ys = X[: args.search_rows], y[: args.search_rows]
    model: dict[str, list[tuple[float, float]]] = {"p": [], "g": []}
    search: dict[str, list[tuple[float, float]]] = {"t1": [], "t2": []}
    with local_cluster(2) as client:
        for repeat in range(args.repeats):
            first, second = ("p", "g") if repeat % 2 == 0 else ("g", "p")
            for who in (first, second):
                model[who].append(single(X, y, cv) if who == "p" else gang(client, X, y, cv))
            for k in (1, 2) if repeat % 2 == 0 else (2, 1):
                search[f"t{k}"].append(throughput(client, Xs, ys, k))
    print(f"\n(1) one model, {args.rows:,} x 20, 3 folds, {args.repeats} repeats")
    rows = []
    for who, runs in model.items():
        times = [t for t, _ in runs]
        rows.append(
            [
                who,
                fmt(statistics.median(times)),
                " ".join(fmt(t) for t in times),
                fmt(runs[-1][1], 5),
            ]
        )
    print_table(["who", "median s", "runs s", "mean AUC"], rows)
    print(f"AUC difference (g - p): {model['g'][-1][1] - model['p'][-1][1]:+.5f}")
    ratios = [g[0] / p[0] for g, p in zip(model["g"], model["p"], strict=True)]
    print(f"time ratio g / p (median of repeats): {statistics.median(ratios):.2f}")
    print(f"\n(2) search of 8 candidates, {args.search_rows:,} rows, cv=2")
    rows = [
        [
            who,
            fmt(statistics.median(r for r, _ in runs)),
            " ".join(fmt(r) for r, _ in runs),
            fmt(runs[-1][1], 5),
        ]
        for who, runs in search.items()
    ]
    print_table(["who", "median trials/min", "runs", "best AUC"], rows)
    print_footer()


if __name__ == "__main__":
    main(sys.argv[1:])
