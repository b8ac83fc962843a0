"""What a state store copy costs a rung step: writing and reading one trial's fold models.

What is measured
    ``dmlsearch._rung_store.StateStore.save`` (cloudpickle, sha256, write aside and move)
    and ``.load`` (read, sha256, unpickle) of one trial's 3 fold models, as a worker runs
    them after and before a rung step, on a local folder (``--folder``, default a
    temporary one: the embedded cluster's case; a registry's artifact store on local disk
    is the same code). Models, fitted on 20 000 x 40 synthetic rows (a fold's two
    thirds): ``SGDClassifier`` (9 epochs), ``GradientBoostingClassifier`` (``--trees``
    trees, depth 3) and ``RandomForestClassifier`` (``--trees`` trees, depth 8). Median
    of ``--repeats`` timings each; the copy's size.

Rerun
    python experiments/benchmarks/state_store_cost.py
    python experiments/benchmarks/state_store_cost.py --folder /mnt/shared/tmp --trees 200
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from typing import Any

import numpy as np
from _common import median, print_footer, print_header, print_table, quiet_warnings
from sklearn.datasets import make_classification
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import SGDClassifier

from dmlsearch._rung_store import StateStore


def _models(args: argparse.Namespace, X: np.ndarray, y: np.ndarray) -> dict[str, list[Any]]:
    rows = 2 * len(X) // 3
    out: dict[str, list[Any]] = {}
    sgd = []
    for k in range(3):
        model = SGDClassifier(random_state=k)
        for _ in range(9):
            model.partial_fit(X[:rows], y[:rows], classes=np.unique(y))
        sgd.append(model)
    out["SGDClassifier, 9 epochs"] = sgd
    out[f"GradientBoosting, {args.trees} trees"] = [
        GradientBoostingClassifier(n_estimators=args.trees, max_depth=3, random_state=k).fit(
            X[:rows], y[:rows]
        )
        for k in range(3)
    ]
    out[f"RandomForest, {args.trees} trees"] = [
        RandomForestClassifier(n_estimators=args.trees, max_depth=8, random_state=k, n_jobs=1).fit(
            X[:rows], y[:rows]
        )
        for k in range(3)
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default=None)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    quiet_warnings()
    print_header("state store cost per rung step", sys.argv, None)
    folder = args.folder or tempfile.mkdtemp(prefix="dmlsearch-state-store-")
    print(f"folder: {folder}; 3 fold models per copy; median of {args.repeats} repeats")
    X, y = make_classification(n_samples=20000, n_features=40, n_informative=10, random_state=0)
    rows = []
    for name, models in _models(args, X, y).items():
        run = uuid.uuid4().hex
        store = StateStore(folder, f"rung-states/{run}", top=10**9)
        saves, loads, size = [], [], 0
        for trial in range(args.repeats):
            t0 = time.perf_counter()
            digest = store.save(run, trial, 1, models)
            saves.append(time.perf_counter() - t0)
            assert digest is not None
            size = os.path.getsize(f"{store.base}/{trial}-1.pkl")
            t0 = time.perf_counter()
            loaded = store.load(trial, 1, digest)
            loads.append(time.perf_counter() - t0)
            assert loaded is not None and len(loaded) == 3
        store.clear()
        rows.append(
            [
                name,
                f"{size / 1e6:.3f}",
                f"{1000 * median(saves):.2f}",
                f"{1000 * median(loads):.2f}",
            ]
        )
    print_table(["fold models (3)", "copy MB", "save ms", "load ms"], rows)
    print_footer()


if __name__ == "__main__":
    main()
