"""dmlsearch's ASHA and Hyperband vs dask-ml, scikit-learn and Optuna at one training budget.

What is measured
    Two workloads, each split 75/25 per seed (stratified); the 25 % is seen by no contender
    and gives the held-out accuracy. eta = 3, from 1 resource unit up to R.
      (sgd) ``SGDClassifier(random_state=0, tol=None)`` trained by epochs on scikit-learn's
            digits (pixels / 16): ``alpha`` log-uniform in [1e-6, 1e-1], ``loss`` in {hinge,
            log_loss, modified_huber}, ``penalty`` in {l2, l1, elasticnet}; R = 27 epochs.
      (xgb) ``XGBClassifier(tree_method="hist", n_jobs=1, random_state=0)`` boosting rounds
            on ``make_classification(50,000 rows, 20 features, 10 informative, 5 redundant,
            flip_y=0.05, random_state=0)``: ``learning_rate`` log-uniform in [0.01, 0.5],
            ``max_depth`` in 2..8, ``subsample`` and ``colsample_bytree`` in [0.5, 1],
            ``min_child_weight`` log-uniform in [1, 50]; R = 27 rounds.
    Contenders (all draw their candidates at random; seed = the repeat's seed):
      dml-asha   dmlsearch ``SearchCV(scheduler=ASHA(1, R, 3, max_total_resource=B))``,
                 ``resource="partial_fit"`` (sgd; ``"max_iter"`` with ``--sgd-resource
                 max_iter``) / ``"n_estimators"`` (xgb), ``cv=3``;
      dml-hb     dmlsearch ``SearchCV(scheduler="hyperband", min_resource=1,
                 max_resource=R, reduction_factor=3)``, same resource, ``cv=3``;
      dml-asha-1split  dml-asha on Optuna's held-out split instead of 3 folds
                 (``cv=StratifiedShuffleSplit(1, test_size=1/3, random_state=seed)``, the
                 same rows as Optuna's split), ``max_total_resource`` 3 times dml-asha's:
                 the same B, spent on 3 times the trials of one model each;
      dml-opt-hb ``dmlsearch.optimize(objective, space, scheduler="hyperband")`` (added
                 2026-12-08): Optuna's objective of the workload written for it
                 (``trial.report`` and ``trial.should_stop()`` after every epoch or round),
                 on Optuna's split, with as many trials as Optuna ran on the seed (it runs
                 right after optuna-hb; there is no budget counter shared by the workers,
                 so its budget is counted after, from the steps each trial reported);
      dml-hb-1split  dml-hb on Optuna's held-out split, ``Hyperband(1, R, 3, rounds=3)``
                 (Li et al.'s outer loop, 3 rounds of the brackets at once): the same B,
                 one model a trial, as Optuna's ``HyperbandPruner`` spends it;
      daskml-hb  dask-ml ``HyperbandSearchCV(aggressiveness=3, test_size=1/3)`` (one
                 held-out split, ``partial_fit`` only: sgd only; it cannot train xgboost
                 rounds, so it is skipped there), ``max_iter`` chosen so that its budget is
                 the closest to B (its only budget knob);
      sk-halving scikit-learn ``HalvingRandomSearchCV(resource="max_iter" (sgd) /
                 "n_estimators" (xgb), min_resources=1, max_resources=R, factor=3, cv=3,
                 n_jobs=2)``, ``n_candidates`` chosen so that its budget is the closest to
                 B (each iteration refits from scratch, and is counted so);
      optuna-hb  Optuna, ``RandomSampler(seed)`` + ``HyperbandPruner(1, R, 3)``, one
                 held-out split of 1/3 of the training rows, ``n_jobs=2`` (two threads in
                 the driver process): sgd one ``partial_fit`` epoch then ``trial.report`` /
                 ``trial.should_prune``; xgb ``xgboost.train`` with a callback that reports
                 the validation accuracy after every round. A shared counter stops the
                 study when B is spent (a trial that would pass it ends there, pruned).
    Budget B: training rows x resource units over the whole search (row-epochs, row-rounds;
    a 3-fold CV step trains 3 models on 2/3 of the rows each, a held-out step one model on
    2/3 of them). B = dmlsearch Hyperband's schedule (each trial counted at the highest rung
    it reaches, as promotions continue); every contender prints what it used (dmlsearch's
    ``total_work_`` counted on the workers, dask-ml's ``metadata_["partial_fit_calls"]``,
    scikit-learn's ``sum(n_candidates_ * n_resources_)``, Optuna's counter).
    Held-out accuracy: the same final fit for every contender, outside the timed search:
    its chosen parameters trained on the whole 75 % up to its chosen resource (dmlsearch's
    ``best_resource_``, dask-ml's ``partial_fit_calls`` of ``best_index_``, scikit-learn's
    chosen ``max_iter``/``n_estimators``, R for Optuna's best complete trial).
    Wall time: the search alone (no refit: ``refit=False`` where there is one).
    The Dask contenders share one ``LocalCluster(2 workers x 1 thread, processes)``;
    scikit-learn uses ``n_jobs=2`` (loky processes), Optuna two threads. The contenders'
    order rotates every seed. Reported: per seed, medians, and the median over seeds of the
    ratio dmlsearch / peer for held-out accuracy, wall time and budget.

dask-ml
    dask-ml 2025.1.0 (the newest) fails on dask >= 2025.3 ("Attempting to use an asynchronous
    Client in a synchronous context of `dask.compute`", dask/dask-ml#1016, open), so in this
    project's environment (dask 2026.8) it can only fail. ``--daskml-python PYTHON`` runs it
    with another interpreter, on its own cluster of the same shape, e.g. a venv made with
    ``pip install "dask[array]==2025.2.0" "distributed==2025.2.0" "dask-ml==2025.1.0"
    "scikit-learn==1.9.1" "numpy==2.4.6" psutil`` (same scikit-learn and numpy as here).

Rerun
    python experiments/benchmarks/multifidelity_peers.py           # 5 seeds, both workloads
    python experiments/benchmarks/multifidelity_peers.py --quick   # 2 seeds, R=9, 10k xgb rows
    python experiments/benchmarks/multifidelity_peers.py --workloads sgd --sgd-resource max_iter
        # dmlsearch counts sgd epochs as max_iter (warm start), as scikit-learn's halving does
    python experiments/benchmarks/multifidelity_peers.py --daskml-python /tmp/daskml-venv/bin/python
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from _common import fmt, local_cluster, print_footer, print_header, print_table, quiet_warnings
from _common import warm_up as warm_workers
from scipy.stats import loguniform, randint, uniform
from sklearn.base import clone
from sklearn.datasets import load_digits, make_classification
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split

# dmlsearch, scikit-learn's halving, xgboost and optuna are imported where they are used:
# the dask-ml child (``--daskml-python``, another environment) imports this module without them.

ETA = 3
N_FOLDS = 3
HOLDOUT = 1 / 3  # the one-split peers' validation share: one CV fold's worth of rows
DML = ("dml-asha", "dml-hb", "dml-asha-1split", "dml-hb-1split")
#: dmlsearch.optimize with Optuna's objective code; it runs after optuna-hb in each seed.
DML_OPT = "dml-opt-hb"
PEERS = ("daskml-hb", "sk-halving", "optuna-hb")
CONTENDERS = (*DML, DML_OPT, *PEERS)


@dataclass(frozen=True)
class Dim:
    """One hyperparameter, written once and translated for every library."""

    name: str
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    integer: bool = False
    choices: tuple[Any, ...] = ()


def dml_space(dims: tuple[Dim, ...]) -> dict[str, Any]:
    from dmlsearch import Categorical, Float, Int

    out: dict[str, Any] = {}
    for d in dims:
        if d.choices:
            out[d.name] = Categorical(list(d.choices))
        elif d.integer:
            out[d.name] = Int(int(d.low), int(d.high))
        else:
            out[d.name] = Float(d.low, d.high, log=d.log)
    return out


def scipy_space(dims: tuple[Dim, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for d in dims:
        if d.choices:
            out[d.name] = list(d.choices)
        elif d.integer:
            out[d.name] = randint(int(d.low), int(d.high) + 1)
        elif d.log:
            out[d.name] = loguniform(d.low, d.high)
        else:
            out[d.name] = uniform(d.low, d.high - d.low)
    return out


def optuna_params(trial: Any, dims: tuple[Dim, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for d in dims:
        if d.choices:
            out[d.name] = trial.suggest_categorical(d.name, list(d.choices))
        elif d.integer:
            out[d.name] = trial.suggest_int(d.name, int(d.low), int(d.high))
        else:
            out[d.name] = trial.suggest_float(d.name, d.low, d.high, log=d.log)
    return out


@dataclass
class Workload:
    """Data, estimator and schedule of one workload."""

    name: str
    unit: str  # what one resource unit is: "epoch", "round"
    X: np.ndarray
    y: np.ndarray
    estimator: Any
    dml_resource: str
    sk_resource: str
    dims: tuple[Dim, ...]
    R: int

    def fold_rows(self) -> int:
        """Training rows of one CV fold (and of the one-split peers' training part)."""
        n = len(self.y) - math.ceil(len(self.y) * 0.25)  # train_test_split(test_size=0.25)
        return n - math.ceil(n * HOLDOUT)


SGD_DIMS = (
    Dim("alpha", 1e-6, 1e-1, log=True),
    Dim("loss", choices=("hinge", "log_loss", "modified_huber")),
    Dim("penalty", choices=("l2", "l1", "elasticnet")),
)
XGB_DIMS = (
    Dim("learning_rate", 0.01, 0.5, log=True),
    Dim("max_depth", 2, 8, integer=True),
    Dim("subsample", 0.5, 1.0),
    Dim("colsample_bytree", 0.5, 1.0),
    Dim("min_child_weight", 1.0, 50.0, log=True),
)


#: xgboost's parameters besides the searched ones, in both objectives (Optuna's, optimize's).
XGB_FIXED = {
    "objective": "binary:logistic",
    "tree_method": "hist",
    "nthread": 1,
    "seed": 0,
    "eval_metric": "error",
    "verbosity": 0,
}


def workloads(args: Any) -> dict[str, Workload]:
    from xgboost import XGBClassifier

    X, y = load_digits(return_X_y=True)
    Xx, yx = make_classification(
        n_samples=args.xgb_rows,
        n_features=20,
        n_informative=10,
        n_redundant=5,
        flip_y=0.05,
        random_state=0,
    )
    return {
        "sgd": Workload(
            "sgd",
            "epoch",
            X / 16.0,
            y,
            SGDClassifier(random_state=0, tol=None),
            getattr(args, "sgd_resource", "partial_fit"),
            "max_iter",
            SGD_DIMS,
            args.sgd_R,
        ),
        "xgb": Workload(
            "xgb",
            "round",
            Xx.astype(np.float32),
            yx,
            XGBClassifier(tree_method="hist", n_jobs=1, random_state=0, verbosity=0),
            "n_estimators",
            "n_estimators",
            XGB_DIMS,
            args.xgb_R,
        ),
    }


def hyperband_work(R: int, eta: int = ETA) -> int:
    """Resource units per fold of dmlsearch's Hyperband when every promotion continues."""
    from dmlsearch.schedulers import hyperband_brackets, rung_resources, rung_sizes

    total = 0
    for b in hyperband_brackets(R, eta):
        resources = rung_resources(b.r, R, eta)
        sizes = rung_sizes(b.n, eta, len(resources) - 1)
        previous = 0
        for n_k, r_k in zip(sizes, resources, strict=True):
            total += n_k * (r_k - previous)
            previous = r_k
    return total


def daskml_calls(max_iter: int) -> int:
    from dask_ml.model_selection import HyperbandSearchCV

    search = HyperbandSearchCV(SGDClassifier(), {"alpha": [1.0]}, max_iter=max_iter)
    return int(search.metadata["partial_fit_calls"])


class Budget:
    """A thread-safe budget of training rows x resource units (Optuna's two threads)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._lock = threading.Lock()

    def take(self, amount: int) -> bool:
        with self._lock:
            if self.used + amount > self.total:
                return False
            self.used += amount
            return True


# ---------------------------------------------------------------- final fit (held-out score)


def final_score(w: Workload, params: dict[str, Any], resource: int, data: tuple[Any, ...]) -> float:
    """The chosen parameters trained on the whole training part up to ``resource``."""
    X_train, X_test, y_train, y_test = data
    params = {k: v for k, v in params.items() if k not in (w.dml_resource, w.sk_resource)}
    model = clone(w.estimator).set_params(**params)
    if w.name == "sgd":
        classes = np.unique(y_train)
        for _ in range(resource):
            model.partial_fit(X_train, y_train, classes=classes)
    else:
        model.set_params(n_estimators=resource).fit(X_train, y_train)
    return float(model.score(X_test, y_test))


# ---------------------------------------------------------------- contenders


def run_dml(
    kind: str, w: Workload, data: tuple[Any, ...], seed: int, client: Any, budget: int
) -> dict[str, Any]:
    from sklearn.model_selection import StratifiedShuffleSplit

    from dmlsearch import SearchCV
    from dmlsearch.schedulers import ASHA, Hyperband

    X_train, _, y_train, _ = data
    # One split is Optuna's (and dask-ml's) held-out split, the same rows (train_test_split
    # stratifies with this splitter); at one budget it trains 3 times the models of cv=3.
    one_split = kind.endswith("-1split")
    n_splits = 1 if one_split else N_FOLDS
    cv: Any = (
        StratifiedShuffleSplit(n_splits=1, test_size=HOLDOUT, random_state=seed)
        if one_split
        else N_FOLDS
    )
    per_fold = budget // (n_splits * w.fold_rows())
    kwargs: dict[str, Any]
    if kind in ("dml-asha", "dml-asha-1split"):
        kwargs = {
            "scheduler": ASHA(1, w.R, ETA, max_total_resource=per_fold),
            "n_trials": per_fold,  # more than the budget can start: the budget ends it
        }
    elif one_split:
        # Li et al.'s outer loop: Hyperband's brackets run N_FOLDS times over (all at once),
        # which spends on one model a trial the budget of one round on N_FOLDS folds.
        hyperband = Hyperband(1, w.R, ETA, rounds=N_FOLDS)
        kwargs = {"scheduler": hyperband, "n_trials": hyperband.n_trials}
    else:
        kwargs = {
            "scheduler": "hyperband",
            "min_resource": 1,
            "max_resource": w.R,
            "reduction_factor": ETA,
        }
    search = SearchCV(
        clone(w.estimator),
        dml_space(w.dims),
        strategy="random",
        resource=w.dml_resource,
        cv=cv,
        refit=False,
        random_state=seed,
        client=client,
        progress=False,
        dashboard=False,
        **kwargs,
    )
    t0 = time.perf_counter()
    search.fit(X_train, y_train)
    wall = time.perf_counter() - t0
    # A promotion is every row of a trial after its first (``iter > 0`` would also count
    # Hyperband's brackets that start above the smallest resource); a start never continues.
    rows = search.cv_results_["trial"]
    promotions = len(rows) - len(set(np.asarray(rows).tolist()))
    continued = int(np.sum(np.asarray(search.cv_results_["continued"], dtype=bool)))
    return {
        "wall": wall,
        "budget": float(search.total_work_) * n_splits * w.fold_rows(),
        "native": f"{fmt(float(search.total_work_), 0)} {w.unit}s/fold",
        "trials": len(search.history_),
        "val": float(search.best_score_),
        "params": dict(search.best_params_),
        "resource": int(search.best_resource_),
        "note": f"{continued}/{promotions} promotions continued",
    }


def daskml_search(
    X_train: np.ndarray, y_train: np.ndarray, seed: int, max_iter: int
) -> dict[str, Any]:
    """dask-ml's ``HyperbandSearchCV`` on the sgd workload, on the default client."""
    from dask_ml.model_selection import HyperbandSearchCV

    search = HyperbandSearchCV(
        SGDClassifier(random_state=0, tol=None),
        scipy_space(SGD_DIMS),
        max_iter=max_iter,
        aggressiveness=ETA,
        test_size=HOLDOUT,
        random_state=seed,
    )
    t0 = time.perf_counter()
    search.fit(X_train, y_train, classes=np.unique(y_train))
    wall = time.perf_counter() - t0
    best = {k: v.item() if isinstance(v, np.generic) else v for k, v in search.best_params_.items()}
    return {
        "wall": wall,
        "calls": int(search.metadata_["partial_fit_calls"]),
        "n_models": int(search.metadata_["n_models"]),
        "val": float(search.best_score_),
        "params": best,
        "resource": int(search.cv_results_["partial_fit_calls"][search.best_index_]),
    }


def _warm_daskml() -> str:
    import dask_ml.model_selection  # noqa: F401
    from sklearn.model_selection import cross_val_score

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    cross_val_score(SGDClassifier(), X, (X[:, 0] > 0).astype(int), cv=3)
    return "ok"


def daskml_child(path_in: str, path_out: str) -> None:
    """``--daskml-child``: one dask-ml search in this interpreter, on its own 2x1 cluster."""
    import json

    import dask
    import dask_ml
    import distributed
    from distributed import Client, LocalCluster

    quiet_warnings()
    data = np.load(path_in)
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        )
    with cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        client.run(_warm_daskml)
        out = daskml_search(
            data["X_train"], data["y_train"], int(data["seed"]), int(data["max_iter"])
        )
    out["versions"] = f"dask {dask.__version__}, dask-ml {dask_ml.__version__}"
    print(f"dask-ml child: distributed {distributed.__version__}", file=sys.stderr)
    with open(path_out, "w", encoding="utf-8") as f:
        json.dump(out, f)


def run_daskml(
    w: Workload, data: tuple[Any, ...], seed: int, budget: int, python: str | None
) -> dict[str, Any]:
    """dask-ml on the benchmark's cluster, or with ``python`` in a child process."""
    X_train, _, y_train, _ = data
    target = budget / w.fold_rows()
    max_iter = min(range(w.R, 8 * w.R + 1), key=lambda m: abs(daskml_calls(m) - target))
    where = "the cluster above"
    if python is None:
        out = daskml_search(X_train, y_train, seed, max_iter)
    else:
        import json
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path_in, path_out = f"{tmp}/in.npz", f"{tmp}/out.json"
            np.savez(path_in, X_train=X_train, y_train=y_train, seed=seed, max_iter=max_iter)
            subprocess.run(
                [python, __file__, "--daskml-child", path_in, path_out], check=True, timeout=1800
            )
            with open(path_out, encoding="utf-8") as f:
                out = json.load(f)
        where = f"own cluster, {out['versions']}"
    return {
        "wall": out["wall"],
        "budget": float(out["calls"] * w.fold_rows()),
        "native": f"{out['calls']} partial_fit calls, max_iter={max_iter}",
        "trials": out["n_models"],
        "val": out["val"],
        "params": out["params"],
        "resource": out["resource"],
        "note": where,
    }


def run_halving(w: Workload, data: tuple[Any, ...], seed: int, budget: int) -> dict[str, Any]:
    from multifidelity import halving_budget
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.model_selection import HalvingRandomSearchCV

    X_train, _, y_train, _ = data
    target = budget / (N_FOLDS * w.fold_rows())
    n = min(range(3, 40 * w.R), key=lambda c: abs(halving_budget(c, w.R, ETA) - target))
    search = HalvingRandomSearchCV(
        clone(w.estimator),
        scipy_space(w.dims),
        n_candidates=n,
        resource=w.sk_resource,
        min_resources=1,
        max_resources=w.R,
        factor=ETA,
        cv=N_FOLDS,
        refit=False,
        random_state=seed,
        n_jobs=2,
    )
    t0 = time.perf_counter()
    search.fit(X_train, y_train)
    wall = time.perf_counter() - t0
    work = sum(c * r for c, r in zip(search.n_candidates_, search.n_resources_, strict=True))
    return {
        "wall": wall,
        "budget": float(work * N_FOLDS * w.fold_rows()),
        "native": f"{work} {w.unit}s/fold (refits), {n} candidates",
        "trials": n,
        "val": float(search.best_score_),
        "params": dict(search.best_params_),
        "resource": int(search.best_params_[w.sk_resource]),
        "note": "",
    }


def _sgd_objective(w: Workload, split: tuple[Any, ...], budget: Budget) -> Callable[[Any], float]:
    import optuna

    X_tr, X_val, y_tr, y_val = split
    classes = np.unique(y_tr)
    rows = len(y_tr)

    def objective(trial: Any) -> float:
        model = clone(w.estimator).set_params(**optuna_params(trial, w.dims))
        score = float("nan")
        for epoch in range(1, w.R + 1):
            if not budget.take(rows):
                trial.study.stop()
                raise optuna.TrialPruned()
            model.partial_fit(X_tr, y_tr, classes=classes)
            score = float(model.score(X_val, y_val))
            trial.report(score, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return score

    return objective


def _xgb_objective(w: Workload, split: tuple[Any, ...], budget: Budget) -> Callable[[Any], float]:
    import optuna
    import xgboost as xgb

    X_tr, X_val, y_tr, y_val = split
    rows = len(y_tr)
    local = threading.local()  # one DMatrix pair per thread, built once (as a user would)

    class Report(xgb.callback.TrainingCallback):
        def __init__(self, trial: Any) -> None:
            self.trial = trial
            self.stopped = ""
            self.score = float("nan")

        def before_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            if budget.take(rows):
                return False
            self.stopped = "budget"
            return True

        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            self.score = 1.0 - float(evals_log["val"]["error"][-1])
            self.trial.report(self.score, epoch + 1)
            if self.trial.should_prune():
                self.stopped = "pruned"
                return True
            return False

    def objective(trial: Any) -> float:
        if not hasattr(local, "dtrain"):
            local.dtrain = xgb.DMatrix(X_tr, label=y_tr)
            local.dval = xgb.DMatrix(X_val, label=y_val)
        params = {**XGB_FIXED, **optuna_params(trial, w.dims)}
        report = Report(trial)
        xgb.train(
            params,
            local.dtrain,
            num_boost_round=w.R,
            evals=[(local.dval, "val")],
            callbacks=[report],
            verbose_eval=False,
        )
        if report.stopped == "budget":
            trial.study.stop()
        if report.stopped:
            raise optuna.TrialPruned()
        return report.score

    return objective


def train_rounds(
    cache: dict[str, Any],
    split: tuple[Any, ...],
    params: dict[str, Any],
    rounds: int,
    report: Callable[[float, int], None],
    stop: Callable[[], bool],
) -> float:
    """One trial as an Optuna user writes it: report every round, then ask."""
    import xgboost as xgb

    if "dtrain" not in cache:  # once per thread or worker, as a user would
        X_tr, X_val, y_tr, y_val = split
        cache["dtrain"] = xgb.DMatrix(X_tr, label=y_tr)
        cache["dval"] = xgb.DMatrix(X_val, label=y_val)
    scores: list[float] = []

    class Report(xgb.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            scores.append(1.0 - float(evals_log["val"]["error"][-1]))
            report(scores[-1], epoch + 1)
            return bool(stop())

    xgb.train(
        {**XGB_FIXED, **params},
        cache["dtrain"],
        num_boost_round=rounds,
        evals=[(cache["dval"], "val")],
        callbacks=[Report()],
        verbose_eval=False,
    )
    return scores[-1]


def _dml_objective(w: Workload, split: tuple[Any, ...]) -> Callable[[dict[str, Any], Any], float]:
    """Optuna's objective of this workload written for ``dmlsearch.optimize``: the same
    training per step, ``trial.report`` and ``trial.should_stop()`` after every step."""
    X_tr, X_val, y_tr, y_val = split
    cache: dict[str, Any] = {}  # per worker: the objective is sent to each worker once

    def sgd(params: dict[str, Any], trial: Any) -> float:
        model = clone(w.estimator).set_params(**params)
        classes, score = np.unique(y_tr), float("nan")
        for epoch in range(1, w.R + 1):
            model.partial_fit(X_tr, y_tr, classes=classes)
            score = float(model.score(X_val, y_val))
            trial.report(score, epoch)
            if trial.should_stop():
                break
        return score

    def xgb_rounds(params: dict[str, Any], trial: Any) -> float:
        return train_rounds(cache, split, params, w.R, trial.report, trial.should_stop)

    return sgd if w.name == "sgd" else xgb_rounds


def run_dml_optimize(
    w: Workload, data: tuple[Any, ...], seed: int, client: Any, n_trials: int
) -> dict[str, Any]:
    """``dmlsearch.optimize`` with ``scheduler="hyperband"`` on Optuna's split, as many
    trials as Optuna ran on this seed (no shared budget counter: the budget used is
    counted after, from the steps each trial reported)."""
    import dmlsearch

    X_train, _, y_train, _ = data
    split = train_test_split(
        X_train, y_train, test_size=HOLDOUT, stratify=y_train, random_state=seed
    )
    t0 = time.perf_counter()
    result = dmlsearch.optimize(
        _dml_objective(w, split),
        dml_space(w.dims),
        n_trials=n_trials,
        scheduler="hyperband",
        min_resource=1,
        max_resource=w.R,
        reduction_factor=ETA,
        random_state=seed,
        client=client,
        dashboard=False,
    )
    wall = time.perf_counter() - t0
    steps = sum(max(t.intermediate, default=0) for t in result.trials)
    complete = [
        t for t in result.trials if t.state == "complete" and max(t.intermediate, default=0) == w.R
    ]
    best = max(complete, key=lambda t: float(t.value or 0.0))
    n_pruned = sum(t.state == "pruned" for t in result.trials)
    return {
        "wall": wall,
        "budget": float(steps * w.fold_rows()),
        "native": f"{steps} {w.unit}s of one model",
        "trials": len(result.trials),
        "val": float(best.value or 0.0),
        "params": dict(best.params),
        "resource": w.R,
        "note": f"{len(complete)} complete at R, {n_pruned} pruned",
    }


def run_optuna(w: Workload, data: tuple[Any, ...], seed: int, budget: int) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    X_train, _, y_train, _ = data
    split = train_test_split(
        X_train, y_train, test_size=HOLDOUT, stratify=y_train, random_state=seed
    )
    counter = Budget(budget)
    make = _sgd_objective if w.name == "sgd" else _xgb_objective
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=seed),
        pruner=optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=w.R, reduction_factor=ETA
        ),
    )
    t0 = time.perf_counter()
    study.optimize(make(w, split, counter), n_jobs=2)
    wall = time.perf_counter() - t0
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if complete:
        best = max(complete, key=lambda t: float(t.value or 0.0))
        val, resource = float(best.value or 0.0), w.R
    else:  # the budget ended before any trial reached R: the best latest score
        trials = [t for t in study.get_trials(deepcopy=False) if t.intermediate_values]
        best = max(trials, key=lambda t: t.intermediate_values[max(t.intermediate_values)])
        resource = max(best.intermediate_values)
        val = float(best.intermediate_values[resource])
    n_pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
    return {
        "wall": wall,
        "budget": float(counter.used),
        "native": f"{counter.used // w.fold_rows()} {w.unit}s of one model",
        "trials": len(study.trials),
        "val": val,
        "params": dict(best.params),
        "resource": resource,
        "note": f"{len(complete)} complete, {n_pruned} pruned",
    }


def run_one(
    kind: str,
    w: Workload,
    data: tuple[Any, ...],
    seed: int,
    client: Any,
    budget: int,
    daskml_python: str | None,
    optuna_trials: int = 0,
) -> dict[str, Any]:
    """One contender on one seed; a failure is recorded (and printed), not raised."""
    try:
        if kind in DML:
            out = run_dml(kind, w, data, seed, client, budget)
        elif kind == DML_OPT:
            out = run_dml_optimize(w, data, seed, client, optuna_trials)
        elif kind == "daskml-hb":
            out = run_daskml(w, data, seed, budget, daskml_python)
        elif kind == "sk-halving":
            out = run_halving(w, data, seed, budget)
        else:
            out = run_optuna(w, data, seed, budget)
    except Exception as exc:  # a peer (or dmlsearch) failing is a result to report
        traceback.print_exc(file=sys.stderr)
        return {"failed": f"{type(exc).__name__}: {exc}"[:200]}
    out["test"] = final_score(w, out["params"], out["resource"], data)
    return out


def _seed_order(kinds: list[str], seed: int) -> list[str]:
    """The contenders' order on ``seed``: rotated, with dml-opt-hb right after optuna-hb."""
    rotating = [k for k in kinds if k != DML_OPT]
    shift = seed % len(rotating)
    order = rotating[shift:] + rotating[:shift]
    if DML_OPT in kinds:
        order.insert(order.index("optuna-hb") + 1, DML_OPT)
    return order


# ---------------------------------------------------------------- report


def _ok(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in results if "failed" not in r]


def report(w: Workload, runs: dict[str, list[dict[str, Any]]], budget: int) -> None:
    print()
    print(
        f"== workload {w.name}: R={w.R} {w.unit}s, eta={ETA}, budget B = {budget:,} "
        f"row-{w.unit}s ({budget // (N_FOLDS * w.fold_rows())} {w.unit}s per fold x "
        f"{N_FOLDS} folds x {w.fold_rows()} rows)"
    )
    rows = []
    for kind, results in runs.items():
        for seed, r in enumerate(results):
            if "failed" in r:
                rows.append([f"{kind} s{seed}", "FAILED", r["failed"], "", "", "", "", "", ""])
                continue
            rows.append(
                [
                    f"{kind} s{seed}",
                    r["trials"],
                    f"{r['budget'] / budget:.3f}",
                    r["native"],
                    f"{r['val']:.4f}",
                    r["resource"],
                    f"{r['test']:.4f}",
                    fmt(r["wall"], 1),
                    r["note"],
                ]
            )
    print_table(
        ["run", "trials", "budget/B", "budget used", "best val", "at", "held-out", "s", "note"],
        rows,
    )
    print()
    medians = []
    for kind, results in runs.items():
        ok = _ok(results)
        if not ok:
            medians.append([kind, f"{len(results)} failed", "", "", "", ""])
            continue
        medians.append(
            [
                kind + (f" ({len(results) - len(ok)} failed)" if len(ok) < len(results) else ""),
                fmt(statistics.median(r["budget"] for r in ok), 0),
                f"{statistics.median(r['budget'] / budget for r in ok):.3f}",
                f"{statistics.median(r['val'] for r in ok):.4f}",
                f"{statistics.median(r['test'] for r in ok):.4f}",
                fmt(statistics.median(r["wall"] for r in ok), 1),
            ]
        )
    print(f"medians over seeds ({w.name}):")
    print_table(
        ["contender", f"budget (row-{w.unit}s)", "/ B", "best val", "held-out acc", "search s"],
        medians,
    )
    print()
    ratios = []
    for mine in (*DML, DML_OPT):
        for peer in PEERS:
            if mine not in runs or peer not in runs:
                continue
            pairs = [
                (a, b)
                for a, b in zip(runs[mine], runs[peer], strict=True)
                if "failed" not in a and "failed" not in b
            ]
            if not pairs:
                continue
            ratios.append(
                [
                    f"{mine} / {peer}",
                    len(pairs),
                    f"{statistics.median(a['test'] / b['test'] for a, b in pairs):.4f}",
                    f"{statistics.median(a['wall'] / b['wall'] for a, b in pairs):.2f}",
                    f"{statistics.median(a['budget'] / b['budget'] for a, b in pairs):.3f}",
                    " ".join(f"{a['wall'] / b['wall']:.2f}" for a, b in pairs),
                ]
            )
    print(f"ratios dmlsearch / peer ({w.name}; median over seeds of the per-seed ratio):")
    print_table(
        ["pair", "seeds", "held-out acc", "wall time", "budget", "wall ratio per seed"], ratios
    )
    sys.stdout.flush()


def _import_xgboost() -> str:
    import xgboost  # noqa: F401

    return "ok"


def main(argv: list[str]) -> None:
    if argv[:1] == ["--daskml-child"]:
        daskml_child(argv[1], argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workloads", default="sgd,xgb")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--sgd-R", type=int, default=27)
    parser.add_argument("--xgb-R", type=int, default=27)
    parser.add_argument("--xgb-rows", type=int, default=50_000)
    parser.add_argument(
        "--sgd-resource",
        default="partial_fit",
        choices=("partial_fit", "max_iter"),
        help="what dmlsearch's sgd searches count: partial_fit calls (default), or max_iter "
        "epochs continued with warm_start (scikit-learn's halving counts max_iter)",
    )
    parser.add_argument(
        "--daskml-python",
        default=None,
        help="run dask-ml in this interpreter (another environment), on its own cluster",
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.sgd_R, args.xgb_R, args.xgb_rows = 2, 9, 9, 10_000
    kinds = [k for k in CONTENDERS if k in args.contenders.split(",")]
    if DML_OPT in kinds and "optuna-hb" not in kinds:
        parser.error(f"{DML_OPT} runs as many trials as optuna-hb: add optuna-hb")
    quiet_warnings()
    print_header(
        "multi-fidelity search: dmlsearch ASHA/Hyperband vs dask-ml, scikit-learn, Optuna",
        sys.argv,
    )
    print(
        "scikit-learn: n_jobs=2 (loky processes); Optuna: n_jobs=2 (two threads in the "
        "driver, in-memory storage); dmlsearch: the cluster above"
    )
    if args.daskml_python is None:
        print("dask-ml: on the cluster above, in this environment")
    else:
        print(
            f"dask-ml: run by {args.daskml_python} (another environment: dask-ml 2025.1 fails "
            "on dask >= 2025.3, dask/dask-ml#1016) on its own LocalCluster(2 workers x 1 "
            "thread, processes, profiler off), started before the timed fit, while the cluster "
            "above idles"
        )
    all_workloads = workloads(args)
    with local_cluster(2) as client:
        warm_workers(client, 2)
        client.run(_import_xgboost)
        _import_xgboost()
        for name in args.workloads.split(","):
            w = all_workloads[name]
            budget = hyperband_work(w.R) * N_FOLDS * w.fold_rows()
            order = [k for k in kinds if not (k == "daskml-hb" and name == "xgb")]
            if name == "xgb" and "daskml-hb" in kinds:
                print(
                    "xgb: dask-ml's HyperbandSearchCV is skipped: it trains only estimators "
                    "with partial_fit, and XGBClassifier has none (boosting rounds are not a "
                    "resource it can count)"
                )
            runs: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
            for seed in range(args.seeds):
                data = tuple(
                    train_test_split(w.X, w.y, test_size=0.25, stratify=w.y, random_state=seed)
                )
                for kind in _seed_order(order, seed):
                    t0 = time.perf_counter()
                    done = runs.get("optuna-hb", [])
                    n_opt = int(done[-1].get("trials", 0)) if len(done) > seed else 0
                    runs[kind].append(
                        run_one(kind, w, data, seed, client, budget, args.daskml_python, n_opt)
                    )
                    print(
                        f"{name} seed {seed} {kind}: {time.perf_counter() - t0:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
            report(w, runs, budget)
    print_footer()


if __name__ == "__main__":
    main(sys.argv[1:])
