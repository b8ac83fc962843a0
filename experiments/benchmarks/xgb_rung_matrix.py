"""xgboost rung steps with and without the worker's training-matrix cache, in one process.

What is measured
    The work a multi-fidelity search's rung steps do on one worker for xgboost rounds:
    ``--trials`` XGBClassifier trials (hist, depth 6, one thread, different learning rates)
    x 3 folds of ``--rows`` x 20 rows (``make_classification``), each trained to 1 round,
    then continued to 3, then to 9 (``dmlsearch.fidelity.train_param``, as ``_rungs`` calls
    it). ``cached``: with ``matrix_key=(run, fold)``, so each fold's quantile matrix is
    built once; ``uncached``: without, as before (xgboost's ``fit`` builds it every step).
    The two alternate ``--repeats`` times; medians, and the ratio cached / uncached. The
    models of both are checked to be identical.

Rerun
    python experiments/benchmarks/xgb_rung_matrix.py              # 25k rows, 9 trials, 3 repeats
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
from _common import median, print_footer, print_header, print_table
from sklearn.datasets import make_classification
from sklearn.model_selection import KFold
from xgboost import XGBClassifier

from dmlsearch.fidelity import train_param


def rungs(X: np.ndarray, y: np.ndarray, trials: int, cached: bool, run: str) -> tuple[float, Any]:
    started = time.perf_counter()
    models = []
    for fold, (train, _) in enumerate(KFold(3, shuffle=True, random_state=0).split(X)):
        key = (run, fold) if cached else None
        Xf, yf = X[train], y[train]
        for t in range(trials):
            est = XGBClassifier(
                tree_method="hist", n_jobs=1, random_state=0, max_depth=6,
                learning_rate=0.05 + 0.05 * t, n_estimators=1,
            )  # fmt: skip
            step = train_param(est, Xf, yf, 1, param="n_estimators", matrix_key=key)
            for previous, resource in ((1, 3), (3, 9)):
                step = train_param(
                    step.estimator, Xf, yf, resource, previous,
                    param="n_estimators", matrix_key=key,
                )  # fmt: skip
            models.append(step.estimator)
    return time.perf_counter() - started, models


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=25_000)
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv[1:])
    print_header("xgboost rung steps: training-matrix cache on vs off", argv, n_workers=None)
    X, y = make_classification(
        n_samples=args.rows, n_features=20, n_informative=10, flip_y=0.05, random_state=0
    )
    X = X.astype(np.float32)
    print(
        f"data: {args.rows} x 20 float32; {args.trials} trials x 3 folds, rungs 1 -> 3 -> 9 "
        f"rounds (9 rounds per model, 3 fits per model); {args.repeats} alternating repeats"
    )
    times: dict[str, list[float]] = {"uncached": [], "cached": []}
    for r in range(args.repeats):
        seconds_off, plain = rungs(X, y, args.trials, False, f"off-{r}")
        seconds_on, reused = rungs(X, y, args.trials, True, f"on-{r}")
        same = all(
            np.array_equal(a.predict_proba(X[:2000]), b.predict_proba(X[:2000]))
            for a, b in zip(plain, reused, strict=True)
        )
        if not same:
            raise SystemExit("cached and uncached models differ")
        times["uncached"].append(seconds_off)
        times["cached"].append(seconds_on)
    base = median(times["uncached"])
    print_table(
        ["approach", "median s", "x uncached", "every repeat s"],
        [
            [name, median(v), median(v) / base, ", ".join(f"{x:.2f}" for x in v)]
            for name, v in times.items()
        ],
    )
    print("models identical with and without the cache: yes")
    print_footer()


if __name__ == "__main__":
    main(sys.argv)
