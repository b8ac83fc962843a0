"""Gangs on a real process cluster: all-or-nothing admission, pinned ranks, fast failure."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import cloudpickle
import dask
import pytest
from distributed import Client, LocalCluster, get_worker

from dmlsearch.exceptions import GangError, GangWorkerLostError, InvalidParameterError
from dmlsearch.runner.gang import METADATA_KEY, alive_workers, reserve, run_gang
from dmlsearch.testing import local_cluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.cluster


def _span(tag: str, seconds: float) -> dict[str, Any]:
    start = time.time()
    time.sleep(seconds)
    return {"tag": tag, "worker": get_worker().address, "start": start, "end": time.time()}


def _prefixes(dask_scheduler: Any) -> list[str]:
    return list(dask_scheduler.task_prefixes)


def _pid() -> int:
    return os.getpid()


def _block(seconds: float) -> None:
    time.sleep(seconds)


def _raise(rank: int) -> int:
    if rank == 1:
        raise ZeroDivisionError("rank one divides by zero")
    time.sleep(2)  # still running when rank 1's error arrives; short: it outlives the test
    return rank


@pytest.fixture(scope="module")
def three() -> Iterator[Client]:
    cluster: LocalCluster = local_cluster(3)
    with Client(cluster, set_as_default=False) as c:
        yield c
    cluster.close()


def test_two_gangs_of_two_on_three_workers_never_interleave(three: Client) -> None:
    out: dict[str, list[dict[str, Any]]] = {}

    def job(tag: str) -> None:
        out[tag] = run_gang(three, _span, [(tag, 1.0), (tag, 1.0)], name=f"job-{tag}")

    threads = [threading.Thread(target=job, args=(tag,)) for tag in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(out) == ["a", "b"]
    for spans in out.values():
        assert len({s["worker"] for s in spans}) == 2  # one rank per worker
    first, second = sorted(out.values(), key=lambda spans: min(s["start"] for s in spans))
    # Only one gang fits at a time: the second starts after the first has ended.
    assert max(s["end"] for s in first) <= min(s["start"] for s in second)
    assert three.get_metadata(METADATA_KEY, default={}) == {}


def test_too_few_workers_fails_before_anything_runs(three: Client) -> None:
    with pytest.raises(
        InvalidParameterError, match="needs 4 workers at once but the cluster has 3"
    ):
        run_gang(three, _span, [("x", 0.0)] * 4, name="toomany")
    # No rank was ever submitted.
    assert not [p for p in three.run_on_scheduler(_prefixes) if p.startswith("toomany")]
    assert three.get_metadata(METADATA_KEY, default={}) == {}


def test_a_rank_that_raises_names_rank_and_worker(three: Client) -> None:
    with reserve(three, 2, name="raiser") as gang:
        with pytest.raises(GangError, match=r"rank 1 of 2 on worker .* ZeroDivisionError") as info:
            gang.run(_raise, [(0,), (1,)])
        assert info.value.rank == 1
        assert info.value.worker == gang.workers[1]
    assert three.get_metadata(METADATA_KEY, default={}) == {}


def _gives_up_on_rank_one(rank: int) -> int:
    if rank == 0:
        raise GangError("rank 0 waited past its timeout for rank 1", rank=1)
    time.sleep(2)  # the late one
    return rank


def test_a_rank_that_gave_up_on_a_peer_blames_the_peer(three: Client) -> None:
    with reserve(three, 2, name="waiter") as gang:
        with pytest.raises(GangError, match=r"rank 0 of 2 .* for rank 1") as info:
            gang.run(_gives_up_on_rank_one, [(0,), (1,)])
        assert info.value.rank == 1
        assert info.value.worker == gang.workers[1]


def test_a_busy_gang_makes_the_next_wait_or_time_out(three: Client) -> None:
    with reserve(three, 2, name="holder"):
        with (
            pytest.raises(GangError, match="2 workers were not free within wait_timeout"),
            reserve(three, 2, name="waiter", wait_timeout=0.5),
        ):
            pass  # pragma: no cover - never admitted
        with reserve(three, 1, name="small") as small:
            assert small.size == 1


def test_a_reservation_left_by_a_driver_that_went_away_is_dropped(three: Client) -> None:
    other = Client(three.scheduler.address, set_as_default=False)
    held = reserve(other, 3, name="crashed-driver")
    held.__enter__()  # never exited: as if that driver died holding every worker
    assert len(three.get_metadata(METADATA_KEY, default={})) == 1
    other.close()
    with reserve(three, 2, name="after", wait_timeout=30) as gang:
        assert gang.size == 2
    assert three.get_metadata(METADATA_KEY, default={}) == {}


def _uneven(rank: int) -> int:
    time.sleep(5.0 * rank)
    return rank


def test_a_rank_still_running_long_after_another_ended_is_stuck(three: Client) -> None:
    with reserve(three, 2, name="straggler") as gang:
        with pytest.raises(GangError, match=r"rank 1 on worker .* still running 0.5 s after"):
            gang.run(_uneven, [(0,), (1,)], finish_grace=0.5)
        # The cancelled rank 1 still sleeps (Dask cannot stop a task): this one queues behind it.
        assert gang.run(_uneven, [(0,), (0,)], finish_grace=10) == [0, 0]


def _sleep_then_stamp(rank: int, path: str) -> None:
    time.sleep(5.0 * rank)
    with open(path, "w") as f:  # the workers share this machine's disk
        f.write(repr(time.time()))


def test_ranks_start_only_when_every_worker_has_a_thread_free(three: Client, tmp_path: Any) -> None:
    stamp = tmp_path / "leftover-ended"
    with reserve(three, 2, name="leftover") as gang:
        with pytest.raises(GangError, match=r"still running 0\.5 s after"):
            gang.run(_sleep_then_stamp, [(0, os.devnull), (1, str(stamp))], finish_grace=0.5)
        # Rank 1 still sleeps on its one thread: a job waits for it, or gives up naming it.
        with pytest.raises(GangError, match=f"worker {gang.workers[1]} .*no free thread"):
            gang.run(_span, [("x", 0.0), ("x", 0.0)], start_timeout=0.5)
        spans = gang.run(_span, [("y", 0.0), ("y", 0.0)])
    # Rank 0's worker was free all along, yet it started with rank 1, after the leftover.
    assert min(s["start"] for s in spans) >= float(stamp.read_text())


def test_a_killed_rank_worker_fails_the_gang_fast_and_releases() -> None:
    cluster = local_cluster(2)
    try:
        with Client(cluster, set_as_default=False) as client:
            with reserve(client, 2, name="victim") as gang:
                victim = gang.workers[1]
                pid = client.run(_pid, workers=[victim])[victim]
                timer = threading.Timer(1.0, os.kill, (pid, signal.SIGKILL))
                timer.start()
                started = time.monotonic()
                with pytest.raises(
                    GangWorkerLostError, match=f"worker {victim} .*left the cluster"
                ) as info:
                    gang.run(_block, [(120,), (120,)])
                elapsed = time.monotonic() - started
                timer.join()
                assert info.value.worker == victim
                assert info.value.rank == 1
                assert elapsed < 60, elapsed
            assert client.get_metadata(METADATA_KEY, default={}) == {}
    finally:
        cluster.close()


def test_alive_workers_never_misses_a_worker_to_the_clients_own_refresh(
    cluster: LocalCluster,
) -> None:
    # The client refreshes its cached scheduler identity (without per-worker details) in
    # the background; read from that cache, about 1 call in 130 saw no workers with a
    # 10 ms refresh (1 in 50,000 at Dask's 2 s), so a gang named its rank 0 as lost.
    with (
        dask.config.set({"distributed.client.scheduler-info-interval": "10ms"}),
        Client(cluster, set_as_default=False) as client,
    ):
        seen = [len(alive_workers(client, running=False)) for _ in range(2000)]
    assert set(seen) == {2}


def test_a_cluster_without_workers_yet_is_waited_for_then_named() -> None:
    # A cluster that is starting (a batch queue, adaptive scaling) has no worker yet: a gang
    # waits for one as searches do, then fails naming the setting (it failed at once with
    # "ask for at most 0").
    from dmlsearch.exceptions import NoWorkersError

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as lc,
        Client(lc, set_as_default=False) as client,
    ):
        with (
            dask.config.set({"dmlsearch.no-workers-timeout": 0.5}),
            pytest.raises(NoWorkersError, match=r"dmlsearch\.no-workers-timeout"),
            reserve(client, 2, name="training"),
        ):
            pass
        threading.Timer(0.3, lambda: lc.scale(2)).start()
        with (
            dask.config.set({"dmlsearch.no-workers-timeout": 30}),
            reserve(client, 2, name="training") as gang,
        ):
            assert len(gang.workers) == 2
