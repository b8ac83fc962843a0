"""Per-trial overhead: N tiny trials with dmlsearch and its peers, on one 2-worker cluster.

What is measured
    Wall time (median of ``--repeats``) of a search over ``N`` candidates (default 1000):
    ``LogisticRegression`` with ``C`` on ``np.logspace(-4, 4, N)``, data
    ``make_classification(n_samples=200, n_features=10, random_state=0)``, ``cv=KFold(3)``,
    ``refit=False`` everywhere (the search alone is timed). Reported as trials/s and as the
    ratio dmlsearch trials/s / peer trials/s (> 1: dmlsearch is faster).

    Peers: scikit-learn ``GridSearchCV`` with n_jobs=1 and n_jobs=2 (loky, outside the
    cluster); ``GridSearchCV`` under joblib's Dask backend; dask-ml ``GridSearchCV``
    (``scheduler=client``); Optuna with ``DaskStorage`` (``study.optimize`` submitted once
    per worker, random sampler, C log-uniform), when ``optuna-integration`` is installed.
    The serial scikit-learn runs use one BLAS thread (``threadpool_limits(1)``), as Dask
    and loky workers do.

    Every timed run happens in a fresh child process of this script (``--only NAME``, the
    driver) connected to the one cluster the parent started, after an untimed warm-up run
    on 8 candidates. Repeats are interleaved (one pass over all approaches per repeat). A
    run longer than ``--time-limit`` seconds (default 240) is stopped, reported as
    "> limit" and not repeated: joblib's Dask backend grows about quadratically with N.

    ``--scale`` (on by default): dmlsearch alone at N and N2 trials (default 10000):
    trials/s, time per trial, the driver's peak RSS growth during ``fit`` (psutil, sampled
    by a thread every 20 ms), Dask tasks submitted, and the workers' busy fraction (sum of
    trial durations / (wall time x workers)).

Rerun
    python experiments/benchmarks/overhead.py            # N=1000, N2=10000, 3 repeats
    python experiments/benchmarks/overhead.py --quick    # N=30, N2=300, 1 repeat
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import joblib
import numpy as np
from _common import (
    PeakRSS,
    local_cluster,
    median,
    print_footer,
    print_header,
    print_table,
    quiet_warnings,
    timer,
    warm_up,
)
from distributed import Client
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from threadpoolctl import threadpool_limits

import dmlsearch

N_WORKERS = 2
TIMED_OUT = 3  # exit code of a child run stopped by its time limit
Approach = Callable[[Client, np.ndarray, np.ndarray, np.ndarray], float]


def _best(cv_results: dict[str, Any]) -> float:
    return float(np.nanmax(np.asarray(cv_results["mean_test_score"], dtype=float)))


# ``--scoring accuracy`` sets this (in the child) to "accuracy": every contender then scores
# through scikit-learn's accuracy scorer; None leaves each with its default (for dmlsearch,
# the shortcut mean(y_pred == y), see dmlsearch/_scoring.py _plain_accuracy).
SCORING: str | None = None
DASHBOARD = True  # dmlsearch's dashboard publishing; the "dml_nodash" contender turns it off


def run_sklearn(n_jobs: int) -> Approach:
    def run(client: Client, X: np.ndarray, y: np.ndarray, cs: np.ndarray) -> float:
        with threadpool_limits(1):
            gs = GridSearchCV(
                LogisticRegression(),
                {"C": list(cs)},
                cv=KFold(3),
                n_jobs=n_jobs,
                refit=False,
                scoring=SCORING,
            )
            gs.fit(X, y)
        return _best(gs.cv_results_)

    return run


def run_joblib_dask(client: Client, X: np.ndarray, y: np.ndarray, cs: np.ndarray) -> float:
    with joblib.parallel_config(backend="dask", client=client):
        gs = GridSearchCV(
            LogisticRegression(),
            {"C": list(cs)},
            cv=KFold(3),
            n_jobs=-1,
            refit=False,
            scoring=SCORING,
        )
        gs.fit(X, y)
    return _best(gs.cv_results_)


def run_dask_ml(client: Client, X: np.ndarray, y: np.ndarray, cs: np.ndarray) -> float:
    from dask_ml.model_selection import GridSearchCV as DaskGridSearchCV

    gs = DaskGridSearchCV(
        LogisticRegression(),
        {"C": list(cs)},
        cv=KFold(3),
        scheduler=client,
        refit=False,
        scoring=SCORING,
    )
    gs.fit(X, y)
    return _best(gs.cv_results_)


def run_dmlsearch(client: Client, X: np.ndarray, y: np.ndarray, cs: np.ndarray) -> float:
    return _best(_dmlsearch_fit(client, X, y, cs, SCORING, DASHBOARD).cv_results_)


def _dmlsearch_fit(
    client: Client,
    X: np.ndarray,
    y: np.ndarray,
    cs: np.ndarray,
    scoring: str | None = None,
    dashboard: bool = True,
) -> Any:
    search = dmlsearch.SearchCV(
        LogisticRegression(),
        {"C": list(cs)},
        strategy="grid",
        cv=KFold(3),
        refit=False,
        client=client,
        random_state=0,
        progress=False,
        scoring=scoring,
        dashboard=dashboard,
    )
    return search.fit(X, y)


def find_dask_storage() -> Any | None:
    """Optuna's DaskStorage class, from wherever this install provides it (or None)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna.integration.dask warns it is deprecated
        for module in ("optuna_integration.dask", "optuna_integration", "optuna.integration"):
            try:
                return importlib.import_module(module).DaskStorage
            except (ImportError, AttributeError):
                continue
        try:
            storages = importlib.import_module("optuna.storages")
            return getattr(storages, "DaskStorage", None)
        except ImportError:
            return None


class _Objective:
    """The Optuna objective: the same CV fit as every other approach."""

    def __init__(self, X: np.ndarray, y: np.ndarray, scoring: str | None = None) -> None:
        self.X = X
        self.y = y
        self.scoring = scoring

    def __call__(self, trial: Any) -> float:
        C = trial.suggest_float("C", 1e-4, 1e4, log=True)
        scores = cross_val_score(
            LogisticRegression(C=C), self.X, self.y, cv=KFold(3), scoring=self.scoring
        )
        return float(scores.mean())


def _optimize(study: Any, objective: _Objective, n_trials: int) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_warnings()
    study.optimize(objective, n_trials=n_trials)
    return n_trials


def run_optuna(storage_cls: Any) -> Approach:
    def run(client: Client, X: np.ndarray, y: np.ndarray, cs: np.ndarray) -> float:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            storage=storage_cls(client=client),
            direction="maximize",
            sampler=optuna.samplers.RandomSampler(),
        )
        n = len(cs)
        parts = [n // N_WORKERS + (1 if i < n % N_WORKERS else 0) for i in range(N_WORKERS)]
        futures = [
            client.submit(_optimize, study, _Objective(X, y, SCORING), k, pure=False) for k in parts
        ]
        client.gather(futures)
        return float(study.best_value)

    return run


APPROACHES: dict[str, tuple[str, Approach]] = {
    "sk1": ("sklearn GridSearchCV n_jobs=1", run_sklearn(1)),
    "sk2": ("sklearn GridSearchCV n_jobs=2 (loky)", run_sklearn(2)),
    "joblib": ("sklearn GridSearchCV + joblib dask", run_joblib_dask),
    "daskml": ("dask-ml GridSearchCV", run_dask_ml),
    "optuna": ("optuna DaskStorage (random)", lambda *a: run_optuna(find_dask_storage())(*a)),
    "dml": ("dmlsearch SearchCV grid", run_dmlsearch),
    # Variants of "dml", run alternately with it in the same pass (see --dashboard, --scoring,
    # --old): the same function under other settings or another checkout of dmlsearch.
    "dml_nodash": ("dmlsearch, dashboard=False", run_dmlsearch),
    "dml_acc": ("dmlsearch, scoring='accuracy'", run_dmlsearch),
    "dml_old": ("dmlsearch, --old checkout", run_dmlsearch),
}
DML = ("dml", "dml_nodash", "dml_acc", "dml_old")
PEERS = ("sk1", "sk2", "joblib", "daskml", "optuna")


# -- child: one approach, one timed run, in a fresh driver process ------------------------------
def child(
    name: str, scheduler: str, n: int, limit: float, scoring: str, dashboard: str
) -> dict[str, Any]:
    global SCORING, DASHBOARD
    SCORING = "accuracy" if (scoring == "accuracy" or name == "dml_acc") else None
    DASHBOARD = dashboard == "on" and name != "dml_nodash"
    quiet_warnings()
    client = Client(scheduler)
    client.wait_for_workers(N_WORKERS)
    X, y = make_classification(n_samples=200, n_features=10, random_state=0)
    fn = APPROACHES[name][1]
    fn(client, X, y, np.logspace(-4, 4, 8))  # untimed warm-up of this code path
    if limit > 0:
        # Stop a run that exceeds the limit: the parent reports it as "> limit".
        watchdog = threading.Timer(limit, lambda: os._exit(TIMED_OUT))
        watchdog.daemon = True
    cs = np.logspace(-4, 4, n)
    out: dict[str, Any] = {"dmlsearch_from": os.path.dirname(dmlsearch.__file__)}
    with PeakRSS(0.02) as mem:
        if limit > 0:
            watchdog.start()
        with timer() as t:
            if name in DML:
                search = _dmlsearch_fit(client, X, y, cs, SCORING, DASHBOARD)
                batches = search.runner_stats_.batch_sizes
                out["score"] = _best(search.cv_results_)
                out["tasks"] = len(batches)
                out["batch"] = float(np.mean(batches))
                busy = sum(o.duration for o in search.trials_)
            else:
                out["score"] = fn(client, X, y, cs)
        if limit > 0:
            watchdog.cancel()
    out["wall"] = t[0]
    out["rss_mb"] = mem.delta_mb
    if name in DML:
        out["busy"] = 100.0 * busy / (t[0] * N_WORKERS)
    client.close()
    return out


@dataclass
class Target:
    """Where a contender's runs go: a scheduler, and the PYTHONPATH its driver starts with."""

    address: str
    pythonpath: str | None = None


def run_child(
    name: str, target: Target, n: int, limit: float, scoring: str = "default", dashboard: str = "on"
) -> dict[str, Any] | None:
    """One timed run in a child process; None when it ran past ``limit`` seconds."""
    cmd = [sys.executable, __file__, "--only", name, "--scheduler", target.address, "--n", str(n)]
    cmd += ["--time-limit", str(limit), "--scoring", scoring, "--dashboard", dashboard]
    env = None
    if target.pythonpath is not None:
        env = dict(os.environ, PYTHONPATH=target.pythonpath)
    # Output goes to files, not pipes: a child stopped by its time limit leaves processes
    # (loky's workers) that would hold a pipe open, and the parent would wait on them.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=err, text=True, env=env, start_new_session=True
        )
        proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the child left in its session
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode == TIMED_OUT:
        time.sleep(3)  # the scheduler forgets the killed client's tasks
        return None
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stdout.write(stdout + stderr)
        raise RuntimeError(f"approach {name} failed with exit code {proc.returncode}")
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def _dmlsearch_dir() -> str:
    import dmlsearch as package

    return os.path.dirname(package.__file__)


def serve_cluster() -> int:
    """``--serve-cluster``: a warmed benchmark cluster for another checkout, until stdin closes."""
    quiet_warnings()
    with local_cluster(N_WORKERS) as client:
        warm_up(client, N_WORKERS)
        dirs = sorted(set(client.run(_dmlsearch_dir).values()))
        print("WORKERS " + ", ".join(dirs), flush=True)
        print("ADDRESS " + str(getattr(client.scheduler, "address", "")), flush=True)
        sys.stdin.read()
    return 0


class ServedCluster:
    """A cluster in a process of its own, started with ``PYTHONPATH=pythonpath``."""

    def __init__(self, pythonpath: str) -> None:
        env = dict(os.environ, PYTHONPATH=pythonpath)
        cmd = [sys.executable, __file__, "--serve-cluster"]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        self.workers_import = ""
        for line in self.proc.stdout:
            if line.startswith("WORKERS "):
                self.workers_import = line[len("WORKERS ") :].strip()
            if line.startswith("ADDRESS "):
                self.target = Target(line[len("ADDRESS ") :].strip(), pythonpath)
                return
        raise RuntimeError(f"the cluster for PYTHONPATH={pythonpath} did not start")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def overhead_part(
    targets: dict[str, Target],
    names: list[str],
    n: int,
    repeats: int,
    limit: float,
    scoring: str,
    dashboard: str,
) -> None:
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in names}
    by_repeat: dict[str, list[float | None]] = {k: [] for k in names}
    stopped: set[str] = set()
    for r in range(repeats):
        # Rotate the order each repeat: no contender always runs first, or right after another.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            label = APPROACHES[name][0]
            if name in stopped:
                print(f"  repeat {r + 1}/{repeats}  {label:<38}  not rerun (ran past {limit:g} s)")
                by_repeat[name].append(None)
                continue
            res = run_child(name, targets[name], n, limit, scoring, dashboard)
            if res is None:
                stopped.add(name)
                by_repeat[name].append(None)
                print(f"  repeat {r + 1}/{repeats}  {label:<38} > {limit:g} s, stopped", flush=True)
                continue
            runs[name].append(res)
            by_repeat[name].append(res["wall"])
            print(
                f"  repeat {r + 1}/{repeats}  {label:<38} {res['wall']:8.2f} s  "
                f"(dmlsearch from {res['dmlsearch_from']})",
                flush=True,
            )

    dml = n / median([x["wall"] for x in runs["dml"]])
    rows = []
    for name in names:
        walls = [x["wall"] for x in runs[name]]
        label = APPROACHES[name][0]
        if not walls:
            rate = n / limit
            # fmt: off
            rows.append([label, f"> {limit:g}", "-", "-", f"< {rate:.2f}", f"> {1e3 / rate:.1f}",
                f"> {dml / rate:.2f}", "-", 0])
            # fmt: on
            continue
        wall = median(walls)
        rate = n / wall
        # fmt: off
        rows.append([label, wall, min(walls), max(walls), rate, 1e3 / rate, dml / rate,
            f"{runs[name][-1]['score']:.4f}", len(walls)])
        # fmt: on
    print(
        f"\n-- overhead: {n} trials x 3 folds, medians over the completed runs "
        f"(scoring: {scoring}, dashboard: {dashboard})"
    )
    # fmt: off
    print_table(["approach", "wall s", "min s", "max s", "trials/s", "ms/trial", "dmlsearch/peer",
        "best mean CV", "runs"], rows)
    # fmt: on
    print(
        "(dmlsearch/peer = dmlsearch trials/s divided by the row's trials/s; each run is a "
        f"fresh driver process on the shared cluster; a run past {limit:g} s is stopped and "
        "not repeated)"
    )
    paired = [k for k in names if k != "dml" and all(by_repeat[k]) and all(by_repeat["dml"])]
    if paired:
        print("\n-- paired: time of the row / time of 'dmlsearch SearchCV grid' in the same repeat")
        for name in paired:
            ratios = [a / b for a, b in zip(by_repeat[name], by_repeat["dml"], strict=True)]  # type: ignore[operator]
            listed = ", ".join(f"{x:.3f}" for x in ratios)
            print(f"{APPROACHES[name][0]:<38} median {median(ratios):.3f}  (repeats: {listed})")
    if runs.get("dml_acc"):
        acc = n / median([x["wall"] for x in runs["dml_acc"]])
        print("\n-- dmlsearch with scoring='accuracy' (no shortcut; what every peer computes)")
        for name in names:
            if name in DML or not runs[name]:
                continue
            rate = n / median([x["wall"] for x in runs[name]])
            print(f"{APPROACHES[name][0]:<38} dmlsearch(accuracy)/peer {acc / rate:.2f}")


def scale_part(target: Target, sizes: list[int], repeats: int) -> None:
    stats: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    for r in range(repeats):
        for n in sizes:
            res = run_child("dml", target, n, 0)
            assert res is not None
            stats[n].append(res)
            print(
                f"  repeat {r + 1}/{repeats}  dmlsearch N={n:<6} {res['wall']:8.2f} s  "
                f"driver peak RSS +{res['rss_mb']:.1f} MB  {res['tasks']} tasks",
                flush=True,
            )
    rows = []
    for n in sizes:
        wall = median([x["wall"] for x in stats[n]])
        # fmt: off
        rows.append([n, wall, n / wall, 1e3 * wall / n, median([x["rss_mb"] for x in stats[n]]),
            int(median([x["tasks"] for x in stats[n]])), median([x["batch"] for x in stats[n]]),
            median([x["busy"] for x in stats[n]])])
        # fmt: on
    print(f"\n-- scale: dmlsearch alone, medians of {repeats} repeat(s)")
    # fmt: off
    print_table(["trials", "wall s", "trials/s", "ms/trial", "driver peak RSS +MB", "Dask tasks",
        "trials/task", "worker busy %"], rows)
    # fmt: on
    first, last = rows[0], rows[-1]
    print(
        f"ms/trial at N={last[0]} / ms/trial at N={first[0]}: {last[3] / first[3]:.2f}; "
        f"driver peak RSS per trial: {1024 * last[4] / last[0]:.2f} KB at N={last[0]}"
    )
    print(
        "worker busy % = sum of trial durations measured on the workers / (wall x workers); "
        "driver peak RSS + = peak minus RSS before fit, in a fresh driver process"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="N=30, N2=300, 1 repeat")
    parser.add_argument("--n", type=int, default=None, help="trials in the comparison")
    parser.add_argument("--n2", type=int, default=None, help="trials of the large scale run")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--scale", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--time-limit", type=float, default=240.0, help="seconds before a run is stopped"
    )
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help=f"comma-separated peers to run beside dmlsearch (default all: {','.join(PEERS)}; "
        "'none' for dmlsearch alone)",
    )
    parser.add_argument(
        "--scoring",
        choices=("default", "accuracy", "both"),
        default="default",
        help="default: each contender's default score (dmlsearch's shortcut "
        "mean(y_pred == y) included); accuracy: every contender passes scoring='accuracy'; "
        "both: default, plus a dmlsearch row with scoring='accuracy' in the same run",
    )
    parser.add_argument(
        "--dashboard",
        choices=("on", "off", "both"),
        default="on",
        help="dmlsearch's dashboard publishing; both: a dashboard=False row alternating with "
        "the dashboard=True one in the same run",
    )
    parser.add_argument(
        "--old",
        metavar="PATH",
        help="also time the dmlsearch found at PATH (a folder holding a dmlsearch package, "
        "e.g. an older commit's tree), alternating with this one; it runs on a cluster of "
        "its own, started with PYTHONPATH=PATH and warmed like the main one",
    )
    parser.add_argument("--only", choices=sorted(APPROACHES), help="child mode: one run")
    parser.add_argument("--scheduler", help="child mode: scheduler address")
    parser.add_argument("--serve-cluster", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    n = args.n or (30 if args.quick else 1000)
    if args.serve_cluster:
        return serve_cluster()
    if args.only:
        if not args.scheduler:
            parser.error("--only needs --scheduler (the parent passes it)")
        result = child(args.only, args.scheduler, n, args.time_limit, args.scoring, args.dashboard)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    n2 = args.n2 or (300 if args.quick else 10000)
    repeats = args.repeats or (1 if args.quick else 3)
    peers = [] if args.peers == "none" else [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = sorted(set(peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown peers {unknown}; choose from {', '.join(PEERS)}")

    quiet_warnings()
    print_header(
        "overhead: many tiny trials", ["experiments/benchmarks/overhead.py", *sys.argv[1:]]
    )
    print(
        f"workload: LogisticRegression, C in np.logspace(-4, 4, N), N={n}, "
        f"make_classification(200, 10, random_state=0), cv=KFold(3), refit=False; "
        f"repeats={repeats}; time limit per run {args.time_limit:g} s; scoring: {args.scoring}; "
        f"dmlsearch dashboard: {args.dashboard}"
    )
    if "daskml" in peers and importlib.util.find_spec("dask_ml") is None:
        print("dask-ml: not installed (pip install dask-ml); its row is left out")
        peers.remove("daskml")
    if "optuna" in peers and find_dask_storage() is None:
        print("optuna DaskStorage: not installed (pip install 'optuna-integration[dask]')")
        peers.remove("optuna")
    names = [*peers, "dml"]
    if args.dashboard == "both":
        names.append("dml_nodash")
    if args.scoring == "both":
        names.append("dml_acc")
    scoring = "default" if args.scoring == "both" else args.scoring
    dashboard = "on" if args.dashboard == "both" else args.dashboard
    served: ServedCluster | None = None
    with local_cluster(N_WORKERS) as client:
        warm_up(client, N_WORKERS)
        main_target = Target(str(getattr(client.scheduler, "address", "")))
        targets = {name: main_target for name in names}
        try:
            if args.old:
                served = ServedCluster(os.path.abspath(args.old))
                print(
                    f"--old: a second cluster, same settings, whose workers import dmlsearch "
                    f"from {served.workers_import}",
                    flush=True,
                )
                names.append("dml_old")
                targets["dml_old"] = served.target
            overhead_part(targets, names, n, repeats, args.time_limit, scoring, dashboard)
        finally:
            if served is not None:
                served.close()
        if args.scale:
            scale_part(main_target, [n, n2], repeats)
    print_footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
