"""A worker SIGKILLed in the middle of an ensemble fit (docs/reliability.md).

``experiments/reliability/worker_loss_units.py`` measures the same over longer bagging
fits and ASHA searches, with a kill every 5 s.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import make_classification
from sklearn.tree import DecisionTreeClassifier

from dmlsearch.ensemble import BaggingClassifier
from dmlsearch.runner.loop import WorkLoop
from dmlsearch.runner.units import DONE, Unit, UnitKind, UnitPolicy, UnitSource, _Signal

pytestmark = pytest.mark.cluster

# The estimator below lives in this test module: workers get it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

N_MEMBERS = 40


class LoggedTree(DecisionTreeClassifier):
    """A decision tree that takes ``seconds`` to fit and logs ``random_state pid`` to ``log``."""

    def __init__(
        self,
        seconds: float = 0.0,
        log: str = "",
        max_depth: int | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(max_depth=max_depth, random_state=random_state)
        self.seconds = seconds
        self.log = log

    def fit(self, X: Any, y: Any, sample_weight: Any = None, check_input: bool = True) -> Any:
        time.sleep(self.seconds)
        if self.log:
            with open(self.log, "a", encoding="ascii") as f:
                f.write(f"{self.random_state} {os.getpid()}\n")
        return super().fit(X, y, sample_weight=sample_weight, check_input=check_input)


def _fits(log: Path) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    if log.exists():
        for line in log.read_text(encoding="ascii").splitlines():
            seed, pid = line.split()
            out[int(seed)].append(int(pid))
    return out


def _kill_mid_fit(client: Client, log: Path, after: int, killed: list[int]) -> None:
    """SIGKILL one worker once ``after`` members are fitted, if the fit is not over yet."""
    pids = sorted(client.run(os.getpid).values())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        n = sum(len(p) for p in _fits(log).values())
        if n >= N_MEMBERS:
            return  # too late: the fit ended first (the test then fails on `killed`)
        if n >= after:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(n)
            return
        time.sleep(0.01)


def _bagging(client: Client, log: Path) -> BaggingClassifier:
    return BaggingClassifier(
        LoggedTree(seconds=0.06, log=str(log), max_depth=4),
        n_estimators=N_MEMBERS,
        max_features=0.7,
        random_state=3,
        client=client,
    )


def test_worker_killed_mid_bagging_fit(fresh_cluster: LocalCluster, tmp_path: Path) -> None:
    """The fit completes with every member once, as the fault-free fit with that seed."""
    X, y = make_classification(n_samples=300, n_features=10, n_informative=5, random_state=0)
    with Client(fresh_cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        clean = _bagging(client, tmp_path / "clean.log").fit(X, y)

        log = tmp_path / "faulty.log"
        killed: list[int] = []
        killer = threading.Thread(target=_kill_mid_fit, args=(client, log, 8, killed))
        killer.start()
        faulty = _bagging(client, log).fit(X, y)
        killer.join()

    assert killed, "the fit ended before a worker could be killed"
    assert killed[0] < N_MEMBERS
    seeds = [int(e.random_state) for e in faulty.estimators_]
    assert len(seeds) == N_MEMBERS and len(set(seeds)) == N_MEMBERS
    assert seeds == [int(e.random_state) for e in clean.estimators_]
    fits = _fits(log)
    # Every member was fitted; one may have been fitted twice (it was running on the
    # killed worker), and each is in the ensemble once.
    assert set(fits) == set(seeds)
    for a, b in zip(faulty.estimators_features_, clean.estimators_features_, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(faulty.predict_proba(X), clean.predict_proba(X))
    np.testing.assert_array_equal(faulty.predict(X), clean.predict(X))
    assert all(len(p) == 1 for p in _fits(tmp_path / "clean.log").values())


# -- a result lost before the driver gathered it ---------------------------------------------
def logged_units(
    log: str, payloads: list[tuple[int, float]], start_by: Any, stop_by: Any
) -> list[int]:
    """Each unit ``(x, seconds)`` sleeps, then logs ``x pid``; its result is ``x``."""
    out = []
    for x, seconds in payloads:
        time.sleep(seconds)
        with open(log, "a", encoding="ascii") as f:
            f.write(f"{x} {os.getpid()}\n")
        out.append(x)
    return out


class LoggedKind(UnitKind[tuple[int, float], int]):
    name = "logged"

    def __init__(self, log: str) -> None:
        super().__init__(UnitPolicy(batchable=False))
        self.log = log

    def function(self) -> Callable[..., Sequence[int]]:
        return logged_units

    def shared(self) -> tuple[Any, ...]:
        return (self.log,)

    def result_id(self, result: int) -> int:
        return result

    def failed(self, unit: Unit[tuple[int, float]], state: str, error: str) -> int:
        return -1


class SlowFirstRecord(UnitSource[tuple[int, float], int]):
    """Proposes ``units``; recording the first result takes ``seconds`` (a slow registry)."""

    def __init__(self, units: list[tuple[int, float]], seconds: float) -> None:
        self.units = list(units)
        self.seconds = seconds
        self.recorded: list[int] = []

    def propose(self) -> Unit[tuple[int, float]] | _Signal:
        if not self.units:
            return DONE
        x, seconds = self.units.pop(0)
        return Unit(x, (x, seconds))

    def record(self, unit: Unit[tuple[int, float]], result: int, retries: int) -> None:
        if not self.recorded:
            time.sleep(self.seconds)
        self.recorded.append(result)
        return None


def test_a_result_waiting_on_a_killed_worker_is_not_run_again(
    fresh_cluster: LocalCluster, tmp_path: Path
) -> None:
    """A unit that ended while the driver was busy recording another is not rerun when its
    worker dies before the driver takes its result: the loop fetches each result as soon as
    its task ends, not when the driver next looks."""
    log = tmp_path / "units.log"
    with Client(fresh_cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        # Unit 0 ends first and its recording blocks the driver for 4 s; unit 1 ends
        # meanwhile, and its worker is killed 1 s later, before the driver looks again.
        source = SlowFirstRecord([(0, 0.1), (1, 0.6)], seconds=4.0)
        loop: WorkLoop[tuple[int, float], int] = WorkLoop(client, LoggedKind(str(log)), source)

        def kill_after_unit_1() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                ran = _fits(log).get(1)
                if ran:
                    time.sleep(1.0)
                    os.kill(ran[0], signal.SIGKILL)
                    return
                time.sleep(0.01)

        killer = threading.Thread(target=kill_after_unit_1)
        killer.start()
        loop.run()
        killer.join()
        time.sleep(1.0)  # room for a rerun Dask might still start

    assert sorted(source.recorded) == [0, 1]
    assert len(_fits(log)[1]) == 1, "unit 1 ran again after its worker died"
