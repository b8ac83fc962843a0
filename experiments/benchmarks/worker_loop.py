"""The worker's trial loop in one process, and what the accuracy shortcut saves.

What is measured (no Dask: everything runs in this process, one BLAS thread)
    Part 1, the loop a worker runs: ``dmlsearch._evaluate.run_trials`` over N candidates
    (default 300; ``LogisticRegression``, C on ``np.logspace(-4, 4, N)``, data
    ``make_classification(200, 10, random_state=0)``, ``KFold(3)``) with

    * the default scorer (for a classifier on integer labels dmlsearch computes
      ``mean(y_pred == y)``, see ``_plain_accuracy`` in ``dmlsearch/_evaluate.py``),
    * ``scoring="accuracy"`` (scikit-learn's accuracy scorer: the shortcut is off),

    against scikit-learn ``GridSearchCV(n_jobs=1, refit=False)`` over the same candidates.
    The three alternate in each repeat (the order rotates); reported are medians of
    ``--repeats`` (default 5) in ms per trial, and ratios of medians.

    Part 2, one call of each way to score a fitted classifier on a test fold of 67 rows:
    ``accuracy_score(y, y_pred)``, ``estimator.score(X, y)`` (what the default scorer
    calls), the accuracy scorer, and the shortcut ``np.mean(estimator.predict(X) == y)``;
    microseconds per call, median of ``--repeats`` rounds of ``--calls`` calls each.

Rerun
    python experiments/benchmarks/worker_loop.py                  # N=300, 5 repeats
    python experiments/benchmarks/worker_loop.py --n 50 --repeats 1   # a quick check
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np
from _common import median, print_footer, print_header, print_table, quiet_warnings, timer
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, get_scorer
from sklearn.model_selection import GridSearchCV, KFold
from threadpoolctl import threadpool_limits

from dmlsearch._evaluate import EvalContext, SearchData, TrialSpec, _plain_accuracy, run_trials
from dmlsearch._scoring import resolve_scoring


def _context(X: np.ndarray, y: np.ndarray, scoring: str | None) -> EvalContext:
    estimator = LogisticRegression()
    scorer = resolve_scoring(estimator, scoring).scorer
    splits = [(np.asarray(tr), np.asarray(te)) for tr, te in KFold(3).split(X, y)]
    return EvalContext(estimator=estimator, scorer=scorer, multimetric=False, splits=splits)


def part1(n: int, repeats: int) -> None:
    X, y = make_classification(n_samples=200, n_features=10, random_state=0)
    cs = np.logspace(-4, 4, n)
    data = SearchData(X, y)
    specs = [TrialSpec(i, {"C": float(c)}, i) for i, c in enumerate(cs)]
    contexts = {"default": _context(X, y, None), "accuracy": _context(X, y, "accuracy")}
    for name, ctx in contexts.items():
        print(f"scoring={name}: shortcut used = {_plain_accuracy(ctx.scorer, ctx.estimator, y)}")

    def dml(scoring: str) -> Callable[[], float]:
        def run() -> float:
            out = run_trials(data, contexts[scoring], specs)
            return float(max(np.mean([f["score"] for f in o.test_scores]) for o in out))

        return run

    def sklearn_grid() -> float:
        gs = GridSearchCV(LogisticRegression(), {"C": list(cs)}, cv=KFold(3), n_jobs=1, refit=False)
        gs.fit(X, y)
        return float(np.max(gs.cv_results_["mean_test_score"]))

    contenders: dict[str, Callable[[], float]] = {
        "dmlsearch run_trials, default scorer (shortcut)": dml("default"),
        "dmlsearch run_trials, scoring='accuracy'": dml("accuracy"),
        "sklearn GridSearchCV n_jobs=1": sklearn_grid,
    }
    names = list(contenders)
    for fn in contenders.values():  # untimed warm-up (imports, first calls)
        fn()
    times: dict[str, list[float]] = {k: [] for k in names}
    best: dict[str, float] = {}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            with timer() as t:
                best[name] = contenders[name]()
            times[name].append(t[0])
            print(
                f"  repeat {r + 1}/{repeats}  {name:<48} {1e3 * t[0] / n:6.2f} ms/trial", flush=True
            )
    ref = median(times["sklearn GridSearchCV n_jobs=1"])
    rows = []
    for name in names:
        ms = [1e3 * x / n for x in times[name]]
        rows.append(
            [name, median(ms), min(ms), max(ms), median(times[name]) / ref, f"{best[name]:.4f}"]
        )
    print(f"\n-- part 1: {n} trials x KFold(3) in one process, medians of {repeats}")
    print_table(["loop", "ms/trial", "min", "max", "time / sklearn", "best mean CV"], rows)
    default = median(times["dmlsearch run_trials, default scorer (shortcut)"])
    acc = median(times["dmlsearch run_trials, scoring='accuracy'"])
    print(
        f"shortcut saving per trial (3 folds): {1e3 * (acc - default) / n:.2f} ms "
        f"({100 * (acc - default) / acc:.0f}% of the loop with scoring='accuracy')"
    )


def part2(repeats: int, calls: int) -> None:
    X, y = make_classification(n_samples=200, n_features=10, random_state=0)
    train, test = next(iter(KFold(3).split(X, y)))
    est = LogisticRegression().fit(X[train], y[train])
    X_test, y_test = X[test], y[test]
    y_pred = est.predict(X_test)
    scorer = get_scorer("accuracy")
    ways: dict[str, Callable[[], float]] = {
        "accuracy_score(y, y_pred)": lambda: float(accuracy_score(y_test, y_pred)),
        "np.mean(y_pred == y)": lambda: float(np.mean(y_pred == y_test)),
        "estimator.score(X, y) (default scorer)": lambda: float(est.score(X_test, y_test)),
        "get_scorer('accuracy')(est, X, y)": lambda: float(scorer(est, X_test, y_test)),
        "np.mean(est.predict(X) == y) (shortcut)": lambda: float(
            np.mean(est.predict(X_test) == y_test)
        ),
        "est.predict(X) alone": lambda: float(est.predict(X_test)[0]),
    }
    values = {name: fn() for name, fn in ways.items()}
    assert len({v for k, v in values.items() if "alone" not in k}) == 1, values
    us: dict[str, list[float]] = {k: [] for k in ways}
    names = list(ways)
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = ways[name]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            us[name].append(1e6 * (time.perf_counter() - t0) / calls)
    rows = [[name, median(us[name]), min(us[name]), max(us[name])] for name in names]
    print(
        f"\n-- part 2: one score of a {len(test)}-row test fold, medians of {repeats} x {calls} calls"
    )
    print_table(["way", "us/call", "min", "max"], rows)
    saving = median(us["estimator.score(X, y) (default scorer)"]) - median(
        us["np.mean(est.predict(X) == y) (shortcut)"]
    )
    print(
        f"default scorer - shortcut: {saving:.0f} us a fold ({3 * saving / 1e3:.2f} ms a "
        "3-fold trial); every way gives the same accuracy: "
        f"{values['accuracy_score(y, y_pred)']:.6f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=300, help="trials in part 1")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000, help="calls per round in part 2")
    args = parser.parse_args(argv)
    quiet_warnings()
    print_header(
        "worker loop and accuracy shortcut, one process",
        ["experiments/benchmarks/worker_loop.py", *sys.argv[1:]],
        n_workers=None,
    )
    print("no Dask cluster: everything runs in this process under threadpool_limits(1)")
    with threadpool_limits(1):
        part1(args.n, args.repeats)
        part2(args.repeats, args.calls)
    print_footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
