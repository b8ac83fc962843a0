"""Bagging and stacking on the cluster vs scikit-learn's own, side by side in one run.

What is measured
    bagging: 100 ``DecisionTreeClassifier(random_state=0)`` members on
    ``make_classification(n_samples=ROWS, n_features=20, n_informative=10, random_state=0)``
    (``--rows``, default 100,000), a 75/25 split; contenders:
      (s1) ``sklearn.ensemble.BaggingClassifier(n_jobs=1)``;
      (s2) ``sklearn.ensemble.BaggingClassifier(n_jobs=2)`` (loky processes);
      (d)  ``dmlsearch.ensemble.BaggingClassifier(client=<2-worker cluster>)``.
    stacking: ``LogisticRegression(max_iter=500)``, ``RandomForestClassifier(50)`` and
    ``HistGradientBoostingClassifier(max_iter=50)`` with ``cv=5`` and a
    ``LogisticRegression`` final estimator, on the first ``--stack-rows`` rows (default
    20,000); contenders (s1) n_jobs=1, (s2) n_jobs=2 and (d) dmlsearch on the same cluster.
    Every contender gets the same ``random_state=0``. Timed: ``fit`` only (wall clock),
    ``--repeats`` times interleaved (the order rotates each repeat); reported: the median
    time, its ratio to each scikit-learn contender (the median of the per-repeat ratios),
    and the held-out accuracy of each, which must agree between contenders.

Rerun
    python experiments/benchmarks/ensembles.py                 # 100,000 rows, 3 repeats
    python experiments/benchmarks/ensembles.py --quick         # 5,000 rows, 1 repeat
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import fmt, local_cluster, print_footer, print_header, print_table, quiet_warnings
from sklearn import ensemble as sk_ensemble
from sklearn.datasets import make_classification
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier

from dmlsearch import ensemble as dml_ensemble


def bagging_contenders(client: Any, n_members: int) -> dict[str, Callable[[], Any]]:
    tree = DecisionTreeClassifier(random_state=0)
    return {
        "s1": lambda: sk_ensemble.BaggingClassifier(
            tree, n_estimators=n_members, n_jobs=1, random_state=0
        ),
        "s2": lambda: sk_ensemble.BaggingClassifier(
            tree, n_estimators=n_members, n_jobs=2, random_state=0
        ),
        "d": lambda: dml_ensemble.BaggingClassifier(
            tree, n_estimators=n_members, random_state=0, client=client
        ),
    }


def base_estimators() -> list[tuple[str, Any]]:
    return [
        ("lr", LogisticRegression(max_iter=500)),
        ("rf", RandomForestClassifier(n_estimators=50, random_state=0)),
        ("hgb", HistGradientBoostingClassifier(max_iter=50, random_state=0)),
    ]


def stacking_contenders(client: Any) -> dict[str, Callable[[], Any]]:
    final = LogisticRegression(max_iter=500)
    return {
        "s1": lambda: sk_ensemble.StackingClassifier(base_estimators(), final, cv=5, n_jobs=1),
        "s2": lambda: sk_ensemble.StackingClassifier(base_estimators(), final, cv=5, n_jobs=2),
        "d": lambda: dml_ensemble.StackingClassifier(base_estimators(), final, cv=5, client=client),
    }


def measure(
    contenders: dict[str, Callable[[], Any]], data: tuple[Any, ...], repeats: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    X_train, X_test, y_train, y_test = data
    times: dict[str, list[float]] = {name: [] for name in contenders}
    accuracy: dict[str, float] = {}
    names = list(contenders)
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            model = contenders[name]()
            start = time.perf_counter()
            model.fit(X_train, y_train)
            times[name].append(time.perf_counter() - start)
            accuracy[name] = float(np.mean(model.predict(X_test) == y_test))
    return times, accuracy


def report(title: str, times: dict[str, list[float]], accuracy: dict[str, float]) -> None:
    print(f"\n{title}")
    rows = []
    for name, values in times.items():
        ratios = {
            ref: statistics.median(v / r for v, r in zip(values, times[ref], strict=True))
            for ref in ("s1", "s2")
        }
        rows.append(
            [
                name,
                fmt(statistics.median(values)),
                " ".join(fmt(v) for v in values),
                fmt(ratios["s1"]),
                fmt(ratios["s2"]),
                fmt(accuracy[name], 4),
            ]
        )
    print_table(["who", "median s", "runs s", "/ s1", "/ s2", "held-out acc"], rows)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--stack-rows", type=int, default=20_000)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.stack_rows, args.repeats = 5_000, 2_000, 1
    quiet_warnings()
    print_header("Bagging and stacking vs scikit-learn", sys.argv)
    print(
        f"bagging: {args.members} trees on {args.rows:,} x 20; stacking: 3 bases, cv=5, "
        f"on {args.stack_rows:,} x 20; {args.repeats} repeats; s1/s2 = scikit-learn n_jobs=1/2, "
        "d = dmlsearch"
    )
    X, y = make_classification(n_samples=args.rows, n_features=20, n_informative=10, random_state=0)
    bag_data = train_test_split(X, y, test_size=0.25, random_state=0)
    stack_data = train_test_split(
        X[: args.stack_rows], y[: args.stack_rows], test_size=0.25, random_state=0
    )
    with local_cluster(2) as client:
        times, accuracy = measure(bagging_contenders(client, args.members), bag_data, args.repeats)
        report("bagging", times, accuracy)
        times, accuracy = measure(stacking_contenders(client), stack_data, args.repeats)
        report("stacking", times, accuracy)
    print_footer()


if __name__ == "__main__":
    main(sys.argv[1:])
