"""Ensemble selection over a search vs the search's best single trial, held out.

What is measured
    On datasets that ship with scikit-learn (breast_cancer, wine, digits, iris:
    classification, accuracy; diabetes: regression, R^2), for each of ``--splits``
    stratified 75/25 train/test splits (seeds 0, 1, ...):
      1. ``SearchCV`` random search, ``--trials`` trials (default 40), ``cv=KFold/
         StratifiedKFold(5, shuffle)``, ``keep_oof=True``, over a heterogeneous space of
         pipelines (StandardScaler + one of: logistic/ridge regression, k-nearest
         neighbours, decision tree, random forest, histogram gradient boosting), scoring the
         default metric, refit of the best trial on the training rows;
      2. ``EnsembleSelection(search, ensemble_size=50, n_init=5, max_candidates=50)`` fitted
         on the same training rows (members refitted on the cluster).
    Reported per dataset and split: the held-out score of the best trial and of the
    ensemble, the gain (ensemble - best trial, positive is better), the ensemble's distinct
    members and its out-of-fold score vs the best trial's; then per dataset the mean gain,
    (``--scoring``: both the search and the selection use that scorer, and it is what is
    reported held out)
    and the count of wins / ties / losses over all splits. Gains are reported as measured,
    losses included.

Rerun
    python experiments/benchmarks/ensemble_selection.py              # 5 datasets x 3 splits
    python experiments/benchmarks/ensemble_selection.py --splits 1 --trials 20   # quicker
    python experiments/benchmarks/ensemble_selection.py --scoring neg_log_loss \
        --datasets breast_cancer wine digits iris      # search and selection on log loss
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np
from _common import local_cluster, print_footer, print_header, print_table, quiet_warnings
from sklearn.datasets import (
    load_breast_cancer,
    load_diabetes,
    load_digits,
    load_iris,
    load_wine,
)
from sklearn.ensemble import (
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold, StratifiedKFold, train_test_split
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from dmlsearch import Float, Int, SearchCV
from dmlsearch.ensemble import EnsembleSelection

DATASETS = {
    "breast_cancer": (load_breast_cancer, True),
    "wine": (load_wine, True),
    "digits": (load_digits, True),
    "iris": (load_iris, True),
    "diabetes": (load_diabetes, False),
}


def space(classifier: bool) -> list[dict[str, Any]]:
    """Five model families, each its own sub-space (a list of dicts)."""
    if classifier:
        return [
            {"model": [LogisticRegression(max_iter=2000)], "model__C": Float(1e-3, 1e2, log=True)},
            {"model": [KNeighborsClassifier()], "model__n_neighbors": Int(1, 40)},
            {"model": [DecisionTreeClassifier(random_state=0)], "model__max_depth": Int(1, 12)},
            {
                "model": [RandomForestClassifier(n_estimators=50, random_state=0)],
                "model__max_features": Float(0.1, 1.0),
                "model__min_samples_leaf": Int(1, 10),
            },
            {
                "model": [HistGradientBoostingClassifier(max_iter=50, random_state=0)],
                "model__learning_rate": Float(0.02, 0.5, log=True),
                "model__max_leaf_nodes": Int(4, 31),
            },
        ]
    return [
        {"model": [Ridge()], "model__alpha": Float(1e-3, 1e3, log=True)},
        {"model": [KNeighborsRegressor()], "model__n_neighbors": Int(1, 40)},
        {"model": [DecisionTreeRegressor(random_state=0)], "model__max_depth": Int(1, 12)},
        {
            "model": [RandomForestRegressor(n_estimators=50, random_state=0)],
            "model__max_features": Float(0.1, 1.0),
            "model__min_samples_leaf": Int(1, 10),
        },
        {
            "model": [HistGradientBoostingRegressor(max_iter=50, random_state=0)],
            "model__learning_rate": Float(0.02, 0.5, log=True),
            "model__max_leaf_nodes": Int(4, 31),
        },
    ]


def one_split(
    client: Any, name: str, split: int, n_trials: int, scoring: str | None
) -> tuple[float, float, int, float, float, float]:
    loader, classifier = DATASETS[name]
    X, y = loader(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.25, random_state=split, stratify=y if classifier else None
    )
    cv = (StratifiedKFold if classifier else KFold)(5, shuffle=True, random_state=split)
    # The placeholder model decides classifier or regressor (stratified folds, classes).
    placeholder = LogisticRegression() if classifier else Ridge()
    pipe = Pipeline([("scale", StandardScaler()), ("model", placeholder)])
    t0 = time.perf_counter()
    search = SearchCV(
        pipe,
        space(classifier),
        strategy="random",
        n_trials=n_trials,
        scoring=scoring,
        cv=cv,
        client=client,
        keep_oof=True,
        random_state=split,
        dashboard=False,
    ).fit(X_train, y_train)
    ens = EnsembleSelection(
        search, ensemble_size=50, n_init=5, max_candidates=50, random_state=split
    ).fit(X_train, y_train)
    seconds = time.perf_counter() - t0
    best_oof = max(ens.single_scores_.values())
    return (
        float(search.score(X_test, y_test)),
        float(ens.score(X_test, y_test)),
        len(ens.members_),
        float(ens.oof_score_),
        float(best_oof),
        seconds,
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--datasets", nargs="*", default=list(DATASETS))
    parser.add_argument("--scoring", default=None, help="a scikit-learn scorer name")
    args = parser.parse_args(argv[1:])
    quiet_warnings()
    print_header("ensemble selection vs the best single trial (held-out score)", argv)
    print(
        f"search: random, {args.trials} trials, 5-fold CV, keep_oof=True; selection: "
        "ensemble_size=50, n_init=5, max_candidates=50; metric: "
        + (args.scoring or "accuracy (classifiers), R^2 (diabetes)")
        + "; 75/25 splits seeded 0.."
    )
    rows, gains = [], {}
    with local_cluster(2) as client:
        for name in args.datasets:
            gains[name] = []
            for split in range(args.splits):
                best, ens, members, oof_ens, oof_best, seconds = one_split(
                    client, name, split, args.trials, args.scoring
                )
                gains[name].append(ens - best)
                rows.append(
                    [
                        name,
                        split,
                        f"{best:.4f}",
                        f"{ens:.4f}",
                        f"{ens - best:+.4f}",
                        members,
                        f"{oof_best:.4f}",
                        f"{oof_ens:.4f}",
                        f"{seconds:.1f}",
                    ]
                )
                print(" ".join(str(c) for c in rows[-1]), flush=True)
    print()
    print_table(
        [
            "dataset",
            "split",
            "best trial",
            "ensemble",
            "gain",
            "members",
            "oof best",
            "oof ens",
            "seconds",
        ],
        rows,
    )
    print()
    summary = []
    for name, values in gains.items():
        wins = sum(g > 1e-12 for g in values)
        losses = sum(g < -1e-12 for g in values)
        summary.append(
            [
                name,
                f"{statistics.mean(values):+.4f}",
                f"{min(values):+.4f}",
                f"{max(values):+.4f}",
                f"{wins}/{len(values) - wins - losses}/{losses}",
            ]
        )
    print_table(["dataset", "mean gain", "min", "max", "wins/ties/losses"], summary)
    every = [g for v in gains.values() for g in v]
    print(
        f"all: mean gain {np.mean(every):+.4f} over {len(every)} splits; "
        f"{sum(g > 1e-12 for g in every)} wins, {sum(g < -1e-12 for g in every)} losses"
    )
    print_footer()


if __name__ == "__main__":
    main(sys.argv)
