"""Registry write path: trial records per second, and what recording costs a search.

Part 1 pushes N synthetic trial outcomes (default 10,000) through the path a search uses
(``SearchRecorder.add`` on each outcome, ``tick`` from the runner loop, batched
``record_trials``) into SQLite and into PostgreSQL, and prints rows/s.

Part 2 runs the overhead workload (tiny LogisticRegression trials, cv=3) with
``registry=None`` and with a SQLite registry on the same 2-worker cluster, alternating,
and prints the median time ratio.

    python experiments/benchmarks/registry_writes.py [--n 10000] [--trials 1000] [--repeats 3] [--part 1|2]

The output starts with the header of ``_common.print_header`` (command, date, machine,
versions, load average) and part 2 prints the ratio of every repeat, not only the medians.

PostgreSQL is taken from ``DMLSEARCH_TEST_POSTGRES`` (default: the CI server at
127.0.0.1:5432, database ``test``); each run uses a private schema that is dropped after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
import warnings

import numpy as np
from _common import print_footer, print_header
from distributed import Client
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold

from dmlsearch import Registry, SearchCV
from dmlsearch._evaluate import TrialOutcome
from dmlsearch._recording import SearchRecorder
from dmlsearch.testing import local_cluster
from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema


def synthetic_outcomes(n: int) -> list[TrialOutcome]:
    rng = np.random.default_rng(0)
    now = time.time()
    return [
        TrialOutcome(
            number=i,
            params={"C": float(rng.lognormal()), "penalty": "l2", "max_iter": 100},
            seed=int(rng.integers(2**31)),
            state="complete",
            test_scores=[{"score": float(rng.random())} for _ in range(3)],
            train_scores=None,
            fit_times=[0.01] * 3,
            score_times=[0.001] * 3,
            started=now,
            finished=now + 0.03,
            worker="tcp://127.0.0.1:1234",
        )
        for i in range(n)
    ]


def write_rate(url: str, outcomes: list[TrialOutcome]) -> float:
    with Registry(url, artifacts=tempfile.mkdtemp()) as registry:
        recorder = SearchRecorder(registry, f"bench-{uuid.uuid4().hex[:6]}", metric="score")
        recorder.open(resume=False, config={"seed": 0}, fingerprint="x", cluster={})
        t0 = time.perf_counter()
        for i, outcome in enumerate(outcomes):
            recorder.add(outcome)
            if i % 50 == 0:  # the runner ticks every loop iteration
                recorder.tick()
        recorder.close("complete")
        elapsed = time.perf_counter() - t0
        assert recorder.experiment_id is not None
        assert registry.store.count_trials(recorder.experiment_id) == len(outcomes)
    return len(outcomes) / elapsed


def part1(n: int, repeats: int) -> None:
    outcomes = synthetic_outcomes(n)
    print(f"-- part 1: {n} trial records through SearchRecorder (medians of {repeats})")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = [write_rate(f"sqlite:///{tmp}/reg-{i}.db", outcomes) for i in range(repeats)]
    with postgres_schema(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)) as url:
        pg = [write_rate(url, outcomes) for _ in range(repeats)]
    print(
        f"sqlite      {statistics.median(sqlite):>10,.0f} rows/s  (runs: {[round(r) for r in sqlite]})"
    )
    print(f"postgresql  {statistics.median(pg):>10,.0f} rows/s  (runs: {[round(r) for r in pg]})")


def part2(n_trials: int, repeats: int) -> None:
    X, y = make_classification(200, 10, random_state=0)
    # The overhead benchmark's workload (overhead.py): C on logspace(-4, 4).
    grid = {"C": list(np.logspace(-4, 4, n_trials))}
    print(f"\n-- part 2: {n_trials} tiny trials, registry=None vs SQLite registry, 2 workers")
    times: dict[str, list[float]] = {"none": [], "sqlite": []}
    with (
        local_cluster(2) as cluster,
        Client(cluster, set_as_default=False) as client,
        tempfile.TemporaryDirectory() as tmp,
    ):
        SearchCV(LogisticRegression(), {"C": [1.0]}, strategy="grid", cv=3, client=client).fit(X, y)
        for r in range(repeats):
            # Alternate which goes first, so neither always follows the other.
            for mode in ("none", "sqlite") if r % 2 == 0 else ("sqlite", "none"):
                registry = None if mode == "none" else f"sqlite:///{tmp}/reg-{r}.db"
                search = SearchCV(
                    LogisticRegression(),
                    grid,
                    strategy="grid",
                    cv=KFold(3),
                    client=client,
                    refit=False,
                    registry=registry,
                    experiment_name=f"e{r}" if registry else None,
                )
                t0 = time.perf_counter()
                search.fit(X, y)
                times[mode].append(time.perf_counter() - t0)
                print(f"  repeat {r + 1}/{repeats}  {mode:<7} {times[mode][-1]:6.2f} s")
    base, rec = statistics.median(times["none"]), statistics.median(times["sqlite"])
    paired = [s / n for s, n in zip(times["sqlite"], times["none"], strict=True)]
    listed = ", ".join(f"{x:.3f}" for x in paired)
    print(f"sqlite/none in each repeat: {listed}; median {statistics.median(paired):.3f}")
    print(
        f"median  none {base:.2f} s ({n_trials / base:.1f} trials/s)  sqlite {rec:.2f} s "
        f"({n_trials / rec:.1f} trials/s)  sqlite/none time ratio {rec / base:.3f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", type=int, choices=(1, 2), help="run one part only")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print_header(
        "registry writes", ["experiments/benchmarks/registry_writes.py", *sys.argv[1:]], None
    )
    print("cluster (part 2): dmlsearch.testing.local_cluster(2)")
    if args.part in (None, 1):
        part1(args.n, args.repeats)
    if args.part in (None, 2):
        part2(args.trials, args.repeats)
    print_footer()
