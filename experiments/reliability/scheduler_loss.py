"""Scheduler loss: SIGKILL the ``dask scheduler`` mid-search, then resume on a new cluster.

What is run, ``--runs`` times (default 6), each with a fresh SQLite registry
    a ``dask scheduler`` and one ``dask worker`` (one thread), started as a user would
    (``tests/test_scheduler_loss.py``'s ``dask_cluster``); a grid search of ``--trials``
    (default 24) trials of 0.3 s (``cv=2``) recording into the registry; the scheduler is
    SIGKILLed once a random number of trials in ``[2, trials - 4]`` is recorded. Runs
    alternate between the two ways of pointing a search at a scheduler:

    * ``address``: ``SearchCV(client="tcp://...")`` (what an experiment file's
      ``cluster.address`` does): dmlsearch's client gives up reconnecting after 10 s;
    * ``Client``: ``SearchCV(client=distributed.Client(address))``: the user's client, with
      Dask's default ``distributed.comm.timeouts.connect`` (30 s).

    Then a new scheduler and worker, and the same search with ``resume=True``.

Checked per run
    * the driver's ``fit`` ends, and with ``SchedulerLostError`` (seconds from the kill);
    * ``Registry.verify_errors()`` is empty and the recorded trials are all ``complete``;
    * the resumed search records exactly the missing trials (none twice) and ends with
      trial numbers 0..N-1, each once.

Rerun
    python experiments/reliability/scheduler_loss.py             # 6 runs
    python experiments/reliability/scheduler_loss.py --runs 2    # a quick check
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))

from _common import print_footer, print_header, print_table
from distributed import Client
from sklearn.datasets import make_classification
from test_scheduler_loss import EXPERIMENT, dask_cluster, recorded, search_of

from dmlsearch import Registry


def one_run(folder: Path, mode: str, trials: int, kill_after: int) -> list[Any]:
    X, y = make_classification(n_samples=40, n_features=4, random_state=0)
    url, artifacts = f"sqlite:///{folder / 'registry.db'}", str(folder / "artifacts")
    outcome: dict[str, Any] = {}

    with dask_cluster(folder / "first") as (address, scheduler):
        client = address if mode == "address" else Client(address, set_as_default=False)

        def fit() -> None:
            try:
                search_of(client, Registry(url, artifacts), resume=False, trials=trials).fit(X, y)
            except BaseException as exc:
                outcome["error"] = exc
            outcome["ended"] = time.monotonic()

        driver = threading.Thread(target=fit, daemon=True)
        driver.start()
        while recorded(url, artifacts) < kill_after and driver.is_alive():
            time.sleep(0.05)
        scheduler.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        driver.join(timeout=120)
        if isinstance(client, Client):
            client.close()
    ended = outcome.get("ended", float("nan")) - killed
    error = type(outcome.get("error")).__name__
    with Registry(url, artifacts, create=False) as registry:
        clean = registry.verify_errors() == {}
        before = registry.trials(EXPERIMENT)
        complete = set(before["state"]) <= {"complete"}

    started = time.monotonic()
    with dask_cluster(folder / "second") as (address, _):
        search = search_of(address, Registry(url, artifacts), resume=True, trials=trials)
        search.fit(X, y)
    resumed = time.monotonic() - started
    with Registry(url, artifacts, create=False) as registry:
        numbers = sorted(registry.trials(EXPERIMENT)["number"])
    exact = numbers == list(range(trials))
    rerun = search.runner_stats_.recorded - (trials - len(before))
    return [mode, kill_after, ended, error, clean and complete, len(before), resumed, exact, rerun]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print_header("scheduler loss: SIGKILL the scheduler, then resume", sys.argv, None)
    rows = []
    for i in range(args.runs):
        mode = "address" if i % 2 == 0 else "Client"
        kill_after = rng.randint(2, args.trials - 4)
        with tempfile.TemporaryDirectory() as folder:
            rows.append(one_run(Path(folder), mode, args.trials, kill_after))
        print(" ".join(str(c) for c in rows[-1]), flush=True)
    print_table(
        [
            "client", "kill after", "driver ended (s)", "error", "registry clean",
            "recorded before", "resume (s)", "exact after", "run twice",
        ],
        rows,
    )  # fmt: skip
    print_footer()


if __name__ == "__main__":
    main()
