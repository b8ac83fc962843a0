"""What xgboost's scikit-learn wrapper adds to a multi-fidelity search's first rung step.

What is measured
    One process, no cluster. On the xgb workload of ``multifidelity_peers.py`` (25,000
    training rows of the 50,000-row task, float32), for each ``max_depth`` from 2 to 8:
    a new ``XGBClassifier`` trained 1 round with ``fit`` on the training matrix that
    ``dmlsearch._xgb_matrices.cached_train_matrix`` keeps (what a worker's first rung step
    does per fold), beside plain ``xgboost.train`` of 1 round on that same matrix (what a
    first step calling xgboost directly and wrapping the booster would pay). Calls
    alternate; each figure is a median over ``--repeats`` calls. The ratio is wrapper /
    plain: what a direct first step could save at most.

Rerun
    PYTHONPATH=. python experiments/benchmarks/xgb_first_step.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import xgboost as xgb
from _common import print_footer, print_header
from sklearn.datasets import make_classification

from dmlsearch import _xgb_matrices


def _medians(depth: int, X: np.ndarray, y: np.ndarray, repeats: int) -> tuple[float, float]:
    """Median ms of the wrapped and the plain one-round fit at ``depth``."""
    kwargs = dict(
        n_estimators=1,
        max_depth=depth,
        tree_method="hist",
        n_jobs=1,
        random_state=0,
        verbosity=0,
    )

    def wrapped() -> None:
        model = xgb.XGBClassifier(**kwargs)
        with _xgb_matrices.cached_train_matrix(model, "bench", X):
            model.fit(X, y)

    wrapped()  # builds the matrix once, as a worker's first step does
    matrix = next(iter(_xgb_matrices._matrices.values()))
    params = {
        "max_depth": depth,
        "tree_method": "hist",
        "nthread": 1,
        "seed": 0,
        "objective": "binary:logistic",
        "verbosity": 0,
    }
    times: dict[str, list[float]] = {"wrapped": [], "plain": []}
    for _ in range(repeats):
        for name, call in (
            ("wrapped", wrapped),
            ("plain", lambda: xgb.train(params, matrix, num_boost_round=1)),
        ):
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    _xgb_matrices._matrices.clear()
    return statistics.median(times["wrapped"]) * 1e3, statistics.median(times["plain"]) * 1e3


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args(argv)
    print_header("xgboost's wrapper in a first rung step", ["xgb_first_step.py", *argv], None)
    X, y = make_classification(
        n_samples=50_000,
        n_features=20,
        n_informative=10,
        n_redundant=5,
        flip_y=0.05,
        random_state=0,
    )
    X, y = X[:25_000].astype(np.float32), y[:25_000]
    print(f"rows {X.shape[0]}, features {X.shape[1]}, repeats {args.repeats}, medians in ms")
    print("max_depth  sklearn fit (cached matrix)  xgboost.train  ratio")
    ratios = []
    for depth in range(2, 9):
        w, p = _medians(depth, X, y, args.repeats)
        ratios.append(w / p)
        print(f"{depth:>9}  {w:27.2f}  {p:13.2f}  {w / p:5.2f}")
    print(f"median ratio over depths: {statistics.median(ratios):.2f}")
    print_footer()


if __name__ == "__main__":
    main(sys.argv[1:])
