"""A worker's rung steps replayed in one process: the time of the steps alone.

What is measured
    ``dmlsearch._rungs.run_rung_step`` (what a worker runs for each rung step) on the
    workloads of ``multifidelity_peers.py``, for one successive-halving bracket as ASHA
    fills it: ``--trials`` trials (random parameters of that script's space) trained to
    1 unit, the best third continued to 3, the best third of those to 9, then to 27, all
    3 folds each (the state cache of this process holds the fold models, as a worker's
    does). No cluster: no task round trip, no driver. Prints the seconds (wall and this
    process's CPU, which other jobs on the machine inflate less) of each repeat
    and the total time in fitting, scoring and the rest of the steps (first steps and
    continued ones), and a digest of every step's fold scores, so that two versions of
    dmlsearch (``PYTHONPATH``) can be checked to score every step the same.

Rerun
    PYTHONPATH=. python experiments/benchmarks/rung_steps.py --workload xgb
    PYTHONPATH=. python experiments/benchmarks/rung_steps.py --no-sampling --alternate
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
from _common import print_footer, print_header, quiet_warnings
from multifidelity_peers import workloads
from sklearn.metrics import check_scoring
from sklearn.model_selection import StratifiedKFold, train_test_split

from dmlsearch import _rungs
from dmlsearch._evaluate import EvalContext, SearchData
from dmlsearch._rungs import RungContext, RungSpec, drop_states, run_rung_step


def candidates(w: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` random parameter sets of the workload's space (log-uniform where log)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        params: dict[str, Any] = {}
        for d in w.dims:
            if d.choices:
                params[d.name] = d.choices[int(rng.integers(len(d.choices)))]
            elif d.log:
                params[d.name] = float(np.exp(rng.uniform(np.log(d.low), np.log(d.high))))
            else:
                params[d.name] = float(rng.uniform(d.low, d.high))
            if d.integer:
                params[d.name] = round(params[d.name])
        out.append(params)
    return out


def bracket(w: Any, trials: int, run: str, fixed: dict[str, Any]) -> tuple[float, float, list[Any]]:
    """One bracket's steps: every trial to 1, the best third on to 3, 9, 27."""
    X, _, y, _ = train_test_split(w.X, w.y, test_size=0.25, stratify=w.y, random_state=0)
    ev = EvalContext(
        estimator=w.estimator, scorer=check_scoring(w.estimator), multimetric=False,
        splits=list(StratifiedKFold(3).split(X, y)), error_score=np.nan,
        return_train_score=False, trial_timeout=None,
    )  # fmt: skip
    context = RungContext(ev, w.dml_resource, run, 0, np.unique(y))
    data = SearchData(X, y, {})
    params = [{**p, **fixed} for p in candidates(w, trials, 0)]
    started, cpu = time.perf_counter(), time.process_time()
    steps = [
        run_rung_step(data, context, RungSpec(t, params[t], t, 0, 1), "w") for t in range(trials)
    ]
    alive = list(range(trials))
    previous = 1
    for rung, resource in enumerate((3, 9, 27), start=1):
        score = {s.number: float(np.mean([f["score"] for f in s.test_scores])) for s in steps}
        alive = sorted(alive, key=lambda t: -score[t])[: max(1, len(alive) // 3)]
        for t in alive:
            spec = RungSpec(t, params[t], t, rung, resource, previous)
            steps.append(run_rung_step(data, context, spec, "w"))
        previous = resource
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    drop_states(run, dask_worker=SimpleNamespace(address="w"))
    return seconds, cpu, steps


_TRAIN = _rungs.train_param


def copying(on: bool) -> None:
    """Rung steps continue xgboost by ``fit(xgb_model=booster)`` (on) or in place (off)."""

    def copied(*args: Any, **kwargs: Any) -> Any:
        return _TRAIN(*args, **{**kwargs, "consume": False})

    _rungs.train_param = copied if on else _TRAIN  # type: ignore[assignment]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="xgb", choices=("sgd", "xgb"))
    parser.add_argument("--trials", type=int, default=27)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sgd-R", type=int, default=27)
    parser.add_argument("--xgb-R", type=int, default=27)
    parser.add_argument("--xgb-rows", type=int, default=50_000)
    parser.add_argument(
        "--no-sampling",
        action="store_true",
        help="xgb: subsample=colsample_bytree=1 (xgboost's row and column sampling draw "
        "from a per-thread generator, so continued models depend on what the thread "
        "trained before; without sampling every model is determined by its parameters)",
    )
    parser.add_argument(
        "--alternate",
        action="store_true",
        help="alternate each repeat with one whose xgboost promotions continue through "
        "fit(xgb_model=booster) (train_param(..., consume=False), as before in-place "
        "boosting), in this one process",
    )
    args = parser.parse_args(argv)
    quiet_warnings()
    print_header("a worker's rung steps replayed in one process", sys.argv, n_workers=None)
    w = workloads(args)[args.workload]
    fixed = {"subsample": 1.0, "colsample_bytree": 1.0} if args.no_sampling else {}
    print(f"{args.workload}: {args.trials} trials, fixed parameters {fixed}")
    bracket(w, 3, "warm-up", fixed)  # imports, and the first matrix built outside the timing
    variants = ("in place", "copied") if args.alternate else ("",)
    times: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.repeats):
        for variant in times:
            copying(variant == "copied")
            seconds, cpu, steps = bracket(w, args.trials, f"repeat-{r}-{variant}", fixed)
            times[variant].append(seconds)
            cpus[variant].append(cpu)
            continued = [s for s in steps if s.from_resource > 0]
            first = [s for s in steps if s.from_resource == 0]
            parts = []
            for label, group in (("first", first), ("continued", continued)):
                total = sum(s.finished - s.started for s in group)
                fit = sum(sum(s.fit_times) for s in group)
                score = sum(sum(s.score_times) for s in group)
                parts.append(
                    f"{label} {len(group)} steps {total:.2f} s (fit {fit:.2f}, score {score:.2f}, "
                    f"rest {total - fit - score:.2f})"
                )
            scores = repr([(s.number, s.resource, s.test_scores) for s in steps]).encode()
            print(
                f"repeat {r} {variant}: {seconds:.2f} s ({cpu:.2f} s CPU); "
                + "; ".join(parts)
                + f"; "
                f"{sum(s.continued for s in continued)}/{len(continued)} continued; "
                f"scores digest {hashlib.sha256(scores).hexdigest()[:16]}"
            )
    for variant, seconds_each in times.items():
        print(
            f"{variant or 'all'}: median {statistics.median(seconds_each):.2f} s, "
            f"{statistics.median(cpus[variant]):.2f} s CPU over {len(seconds_each)} repeats"
        )
    print_footer()


if __name__ == "__main__":
    main(sys.argv[1:])
