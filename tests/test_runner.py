"""The runner's one futures loop, over a kind of unit that is not a search trial."""

from __future__ import annotations

import threading
import time
import warnings

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import make_classification

from dmlsearch import AllTrialsFailedError, NoWorkersError, SearchCV, TrialTimeoutError
from dmlsearch._evaluate import _quiet_warnings
from dmlsearch.exceptions import DmlsearchError
from dmlsearch.runner import DONE, WAIT, Unit, UnitPolicy, UnitSource, WorkLoop
from dmlsearch.testing import PowerKind, SleepyClassifier, WaveSource, local_cluster

pytestmark = pytest.mark.cluster


def test_units_of_another_kind_run_once_each_with_shared_data_sent_once(client):
    source = WaveSource(n=40, wave=40)
    loop = WorkLoop(client, PowerKind(exponent=3), source, name="cubes")
    stats = loop.run()
    assert source.results == {x: x**3 for x in range(40)}
    assert source.record_calls == 40 == stats.recorded
    assert stats.rescattered == 0
    # Cheap units are packed several to a task once a duration is known.
    assert max(stats.batch_sizes) > 1


def test_a_source_may_answer_wait_until_results_arrive(client):
    source = WaveSource(n=12, wave=4, seconds=0.05)
    stats = WorkLoop(client, PowerKind(), source, name="waves").run()
    assert source.results == {x: x**2 for x in range(12)}
    assert source.waits >= 2  # asked again after each wave ended
    assert stats.recorded == 12


class _StuckSource(UnitSource[tuple[int, float], tuple[int, int]]):
    def propose(self) -> Unit[tuple[int, float]] | object:
        return WAIT

    def record(self, unit, result, retries):  # pragma: no cover - never called
        return None


def test_waiting_with_nothing_in_flight_is_an_error_not_a_hang(client):
    with pytest.raises(DmlsearchError, match="nothing is running"):
        WorkLoop(client, PowerKind(), _StuckSource(), name="stuck").run()


def test_unit_timeout_counts_from_the_start_not_from_the_queue():
    """A unit queued behind other work on a one-thread worker is not timed out for it."""
    cluster = local_cluster(1)
    try:
        with Client(cluster, set_as_default=False) as c:
            # Another user's task holds the only thread for longer than timeout + grace.
            blocker = c.submit(time.sleep, 7.0, pure=False)
            time.sleep(0.5)
            policy = UnitPolicy(timeout=0.5, grace=2.0, report_starts=True)
            source = WaveSource(n=1, wave=1, seconds=0.1)
            stats = WorkLoop(c, PowerKind(policy=policy), source, name="queued").run()
            assert source.results == {0: 0}
            assert stats.hard_timeouts == 0
            # The innocent blocker was not killed by a worker restart.
            assert blocker.result() is None
    finally:
        cluster.close()


def test_no_workers_fails_fast_with_a_clear_error():
    cluster = LocalCluster(n_workers=0, processes=True, dashboard_address=None)
    try:
        with (
            Client(cluster, set_as_default=False) as c,
            dask.config.set({"dmlsearch.no-workers-timeout": 2.0}),
        ):
            X, y = make_classification(n_samples=40, random_state=0)
            t0 = time.monotonic()
            with pytest.raises(NoWorkersError, match=r"dmlsearch\.no-workers-timeout"):
                SearchCV(
                    SleepyClassifier(), {"parameter": [1.0, 2.0]}, cv=2, client=c, progress=False
                ).fit(X, y)
            assert time.monotonic() - t0 < 30
    finally:
        cluster.close()


def test_an_adaptive_cluster_without_workers_scales_up_for_a_search():
    # An adaptive cluster asks for workers when tasks wait, never for data: with the shared
    # data sent first, adapt(minimum=0) never got a worker (NoWorkersError after 60 s).
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as c,
        dask.config.set({"dmlsearch.no-workers-timeout": 30.0}),
    ):
        cluster.adapt(minimum=0, maximum=2, interval="100ms")
        X, y = make_classification(n_samples=40, random_state=0)
        search = SearchCV(
            SleepyClassifier(), {"parameter": [1.0, 2.0]}, cv=2, client=c, progress=False
        ).fit(X, y)
        assert len(search.cv_results_["params"]) == 2 and len(c.nthreads()) >= 1


def test_no_workers_left_mid_run_fails_instead_of_waiting_forever():
    cluster = local_cluster(1)
    try:
        with (
            Client(cluster, set_as_default=False) as c,
            dask.config.set({"dmlsearch.no-workers-timeout": 2.0}),
        ):
            source = WaveSource(n=200, wave=200, seconds=0.05)
            loop = WorkLoop(c, PowerKind(), source, name="orphan", no_workers_timeout=2.0)

            def remove_workers() -> None:
                deadline = time.monotonic() + 30
                while source.record_calls < 3 and time.monotonic() < deadline:
                    time.sleep(0.05)
                cluster.scale(0)

            threading.Thread(target=remove_workers).start()
            with pytest.raises(NoWorkersError, match="worker"):
                loop.run()
            # What finished before the workers went stays recorded.
            assert source.record_calls == len(source.results) > 0
    finally:
        cluster.close()


def test_a_stuck_trial_on_a_worker_without_a_nanny_says_it_was_not_restarted():
    # Such a worker cannot be restarted; the record said "its worker ... was restarted".
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as c,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        X, y = make_classification(n_samples=40, random_state=0)
        search = SearchCV(
            SleepyClassifier(seconds=7.0, mode="native"), {"parameter": [1.0]}, cv=2,
            trial_timeout=0.5, error_score=0.0, client=c, progress=False,
        )  # fmt: skip
        with pytest.raises(AllTrialsFailedError) as caught:
            search.fit(X, y)
    assert "could not be restarted" in str(caught.value)
    assert "was restarted" not in str(caught.value)


def test_trial_timeout_error_is_not_an_oserror():
    # `except OSError` in an estimator's own code must not swallow a timeout.
    assert not issubclass(TrialTimeoutError, OSError)
    assert issubclass(TrialTimeoutError, DmlsearchError)


def test_quiet_warnings_restores_the_filters_when_threads_end_out_of_order():
    before = warnings.filters[:]
    entered = threading.Barrier(2)
    first_done = threading.Event()

    def first() -> None:
        with _quiet_warnings():
            entered.wait()
        first_done.set()

    def second() -> None:
        with _quiet_warnings():
            entered.wait()
            first_done.wait()
            # The first thread left; this one still runs quietly.
            assert warnings.filters[0][0] == "ignore"

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert warnings.filters == before


def test_seeded_search_on_multithreaded_workers_warns_about_reproducibility():
    cluster = local_cluster(1, threads_per_worker=2)
    try:
        with Client(cluster, set_as_default=False) as c:
            X, y = make_classification(n_samples=40, random_state=0)
            with pytest.warns(UserWarning, match="one thread each"):
                SearchCV(
                    SleepyClassifier(),
                    {"parameter": [1.0, 2.0]},
                    cv=2,
                    client=c,
                    random_state=0,
                    progress=False,
                ).fit(X, y)
    finally:
        cluster.close()


def test_done_and_wait_are_distinct_signals():
    assert DONE is not WAIT
    assert repr(DONE) == "DONE" and repr(WAIT) == "WAIT"
    assert np.isfinite(UnitPolicy(timeout=1.0).grace)


UNGUARDED = """
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from dmlsearch import SearchCV

X, y = make_classification(n_samples=60, random_state=0)
SearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=2, progress=False).fit(X, y)
"""


def _run_script(folder, name: str, text: str):
    import subprocess
    import sys

    script = folder / name
    script.write_text(text)
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=folder
    )


def test_a_script_without_the_main_guard_is_told_what_to_add(tmp_path):
    proc = _run_script(tmp_path, "unguarded.py", UNGUARDED)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert 'if __name__ == "__main__":' in last
    assert "unguarded.py, line 7" in last
    # One error, not hundreds of lines of multiprocessing bootstrapping failures.
    assert len(proc.stderr.splitlines()) < 30


HALF_GUARDED = """
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from dmlsearch import SearchCV

X, y = make_classification(n_samples=60, random_state=0)
if __name__ == "__main__":
    SearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=2, progress=False).fit(X, y)
SearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=2, progress=False).fit(X, y)
"""


def test_a_search_after_the_main_guard_fails_fast_instead_of_hanging(tmp_path):
    # The first search is guarded, so the script passes the check; its worker processes
    # re-run the script and meet the second. They could not start, and the first search
    # waited for them for ever.
    proc = _run_script(tmp_path, "halfguard.py", HALF_GUARDED)
    assert proc.returncode != 0
    assert "halfguard.py, line 9" in proc.stderr
    assert 'if __name__ == "__main__":' in proc.stderr


def test_units_report_progress_and_a_source_can_cancel_one(client):
    from dmlsearch.testing.units import PruningSource, SteppingKind

    source = PruningSource(n=3, steps=4, seconds=0.3, victim=1, at_step=1)
    loop = WorkLoop(client, SteppingKind(), source, name="pruning", max_units_in_flight=3)
    t0 = time.monotonic()
    stats = loop.run()
    elapsed = time.monotonic() - t0
    # Intermediate reports reached the source, by unit.
    assert {(0, 0), (1, 0), (1, 1), (2, 0)} <= set(source.reports)
    # The victim was recorded once, as cancelled; the others ran to the end.
    assert source.results == {0: 4, 1: -1, 2: 4}
    assert stats.recorded == 3
    assert elapsed < 30


def _heartbeat_filters() -> list[str]:
    import logging

    return [getattr(f, "__name__", "") for f in logging.getLogger("distributed.worker").filters]


def test_embedded_workers_drop_the_heartbeat_traceback_of_a_closing_scheduler(client):
    # A scheduler that stops before a worker's heartbeat arrives made distributed print a
    # traceback at the end of a search that went well (seen in a README example's stderr).
    import logging

    from dmlsearch.runner._worker_logging import _not_heartbeat_loss, dask_setup

    assert set(map(tuple, client.run(_heartbeat_filters).values())) == {("_not_heartbeat_loss",)}
    logger = logging.getLogger("distributed.worker")
    dask_setup(None)
    dask_setup(None)  # once only
    try:
        assert logger.filters.count(_not_heartbeat_loss) == 1
        record = logger.makeRecord(
            logger.name, logging.ERROR, __file__, 0,
            "Failed to communicate with scheduler during heartbeat.", (), None,
        )  # fmt: skip
        assert not logger.filter(record)
        other = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "x", (), None)
        assert logger.filter(other)
    finally:
        logger.removeFilter(_not_heartbeat_loss)
