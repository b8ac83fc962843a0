"""The ranks' collectives through shared memory: the sums and broadcasts gloo gives, a lost
or failed peer ending the wait at once, a timeout, and the fallback (docs/training.md)."""

from __future__ import annotations

import contextlib
import glob
import mmap
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import cloudpickle
import dask
import numpy as np
import pytest
import torch
import torch.distributed as dist
from distributed import Client

from dmlsearch.exceptions import GangError, TrainingError
from dmlsearch.training import DataParallelTrainer, _shm
from dmlsearch.training._shm import Collectives, capacity_for, open_collectives

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.skipif(
    not _shm._host_supports(), reason="shared-memory collectives need Linux on x86-64"
)

CAPACITY = capacity_for([torch.zeros(1000, dtype=torch.float64)])


#: The processes of the last _run (other tests' jobs make files of their own meanwhile).
PIDS: list[int] = []


def _files() -> set[str]:
    """The files that the last _run's processes left in /dev/shm."""
    return {p for p in glob.glob(f"/dev/shm/{_shm.PREFIX}*") if int(p.split("-")[1]) in PIDS}


def _entry(rank: int, world: int, port: int, fn: Callable[..., Any], out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        out.put((rank, fn(rank, world)))
    except BaseException as exc:
        out.put((rank, exc))
    finally:
        dist.destroy_process_group()


def _run(fn: Callable[..., Any], world: int, wait: float = 120.0) -> dict[int, Any]:
    """``fn(rank, world)`` in ``world`` spawned processes of one gloo group; by rank, what
    each returned or raised (a rank that was killed is missing)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, out)) for r in range(world)]
    for p in procs:
        p.start()
    PIDS[:] = [p.pid for p in procs]
    results: dict[int, Any] = {}
    ends = time.monotonic() + wait
    while len(results) < world and time.monotonic() < ends:
        try:
            rank, value = out.get(timeout=1)
        except Exception:
            if all(not p.is_alive() for p in procs):
                break
            continue
        results[rank] = value
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    return results


def _sums(rank: int, world: int) -> dict[str, Any]:
    comm = open_collectives(rank, world, CAPACITY, 30.0, True)
    got: dict[str, Any] = {"name": comm.name}
    for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
        for n in (1, 7, 1000, CAPACITY // torch.empty((), dtype=dtype).element_size() + 1):
            # Many ops in a row: a rank that refilled its slot before a slower one read
            # it would show as a wrong sum.
            for i in range(30):
                t = torch.arange(n).to(dtype) + (rank * 100 + i)
                comm.all_reduce(t)
                got[f"sum {dtype} {n} {i}"] = t.float().numpy().copy()
            b = torch.full((n,), float(rank + 1)).to(dtype)
            comm.broadcast(b, src=world - 1)
            got[f"bcast {dtype} {n}"] = b.float().numpy().copy()
    got["gen"] = getattr(comm, "gen", None)
    comm.close(failed=False)
    return got


def test_sums_and_broadcasts_are_every_rank_s_and_the_same_on_all() -> None:
    results = _run(_sums, 3)
    assert sorted(results) == [0, 1, 2]
    for got in results.values():
        assert not isinstance(got, BaseException), got
        assert got["name"] == "shared-memory"
        # 4 dtypes x 3 sizes that fit x (30 all-reduces + a broadcast): the 4th size,
        # one element over the slot, went through gloo.
        assert got["gen"] == 4 * 3 * 31
        for key, value in got.items():
            if key.startswith("sum"):
                n, i = int(key.split()[2]), int(key.split()[3])
                dtype = getattr(torch, key.split()[1].removeprefix("torch."))
                want = sum((torch.arange(n).to(dtype) + (r * 100 + i)).double() for r in range(3))
                rtol = 0.02 if dtype == torch.bfloat16 else 1e-6
                np.testing.assert_allclose(value, want.numpy(), rtol=rtol, err_msg=key)
                assert np.array_equal(value, results[0][key]), key  # the same bits
            elif key.startswith("bcast"):
                assert np.all(value == 3.0), key
    assert not _files()  # unlinked once mapped


def _dies(rank: int, world: int) -> Any:
    comm = open_collectives(rank, world, CAPACITY, 60.0, True)
    t = torch.ones(10)
    comm.all_reduce(t)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    started = time.monotonic()
    try:
        comm.all_reduce(t)
    except GangError as exc:
        return (comm.name, str(exc), exc.rank, time.monotonic() - started)
    return "no error"


def test_a_peer_killed_mid_job_ends_the_wait_at_once() -> None:
    results = _run(_dies, 2)
    assert 1 not in results  # killed
    name, message, rank, waited = results[0]
    assert name == "shared-memory"
    assert "rank 1's process" in message and "ended" in message and rank == 1
    assert waited < 10  # the job's timeout is 60 s


def _raises(rank: int, world: int) -> Any:
    comm = open_collectives(rank, world, CAPACITY, 60.0, True)
    if rank == 1:
        comm.close(failed=True)  # what a rank that raises does on its way out
        time.sleep(5)  # and its process lives on
        return "closed"
    started = time.monotonic()
    try:
        comm.all_reduce(torch.ones(3))
    except GangError as exc:
        return (str(exc), time.monotonic() - started)
    return "no error"


def test_a_peer_that_failed_ends_the_wait_at_once() -> None:
    results = _run(_raises, 2)
    message, waited = results[0]
    assert "rank 1 failed while rank 0 waited for it in a shared-memory all-reduce" in message
    assert waited < 5
    assert results[1] == "closed"


def _late(rank: int, world: int) -> Any:
    comm = open_collectives(rank, world, CAPACITY, 1.0, True)
    if rank == 1:
        time.sleep(6)
        return "late"
    started = time.monotonic()
    try:
        comm.broadcast(torch.ones(3), src=1)
    except GangError as exc:
        return (str(exc), time.monotonic() - started)
    return "no error"


def test_a_peer_that_never_comes_fails_the_wait_after_the_timeout() -> None:
    results = _run(_late, 2)
    message, waited = results[0]
    assert "past the job's timeout=1 s" in message and "ranks [1]" in message
    assert 1 <= waited < 5


def _apart(rank: int, world: int) -> Any:
    if rank == 1:
        _shm._attach = lambda *args: None  # as on another host: rank 0's file is not here
    comm = open_collectives(rank, world, CAPACITY, 30.0, True)
    t = torch.full((5,), float(rank + 1))
    comm.all_reduce(t)
    return comm.name, t.tolist()


def test_a_file_whose_creator_was_killed_is_removed_by_the_next_job() -> None:
    ctx = multiprocessing.get_context("spawn")
    gone = ctx.Process(target=time.sleep, args=(0,))
    gone.start()
    gone.join()
    orphan = f"/dev/shm/{_shm.PREFIX}{gone.pid}-0123"
    alive = f"/dev/shm/{_shm.PREFIX}{os.getpid()}-0123"  # a job of this process: kept
    for path in (orphan, alive):
        with open(path, "wb"):
            pass
    try:
        results = _run(_apart, 2)  # rank 0 creates a file
        assert not os.path.exists(orphan) and os.path.exists(alive)
        assert results[0][0] == "torch.distributed"
    finally:
        for path in (orphan, alive):
            with contextlib.suppress(OSError):
                os.unlink(path)


def test_ranks_that_cannot_all_map_the_file_use_torch_distributed() -> None:
    results = _run(_apart, 2)
    assert results[0] == results[1] == ("torch.distributed", [3.0] * 5)
    assert not _files()
    assert open_collectives(0, 2, CAPACITY, 1.0, enabled=False).name == Collectives.name


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
    )


def _sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out.squeeze(-1), target)


@pytest.mark.cluster
@pytest.mark.parametrize("sync", ["allreduce", "average"])
def test_the_trainer_trains_the_same_bits_over_shared_memory_and_gloo(
    client: Client, sync: str
) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    y = (X @ rng.normal(size=6)).astype(np.float32)

    def fit() -> DataParallelTrainer:
        return DataParallelTrainer(
            _mlp, _mse, _sgd, epochs=3, batch_size=16, sync=sync,
            average_every=3 if sync == "average" else 1,
            n_workers=2, random_state=0, client=client, checkpoint_every=None,
        ).fit(X, y)  # fmt: skip

    shared = fit()
    with dask.config.set({_shm.CONFIG_KEY: False}):
        gloo = fit()
    assert shared.transport_ == "shared-memory" and gloo.transport_ == "gloo"
    for (name, a), b in zip(
        shared.model_.state_dict().items(), gloo.model_.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name  # two ranks: the same sums, bit for bit
    assert [h["loss"] for h in shared.history_] == [h["loss"] for h in gloo.history_]


def _late_rank(rank: int, world: int) -> Any:
    comm = open_collectives(rank, world, CAPACITY, 1.0, True)
    t = torch.ones(3)
    comm.all_reduce(t)
    if rank == 0:
        try:
            comm.all_reduce(t)  # rank 1 is late: times out
        except GangError:
            comm.close(failed=True)
            time.sleep(4)
            return "gave up"
        return "no error"
    time.sleep(2.5)
    try:
        comm.all_reduce(t)  # rank 0 arrived, then gave up: this op must not complete
    except GangError as exc:
        return str(exc)
    return "completed"


def test_a_late_rank_learns_its_peer_gave_up_at_its_next_collective() -> None:
    # It found rank 0's counter arrived, finished the op and trained one more step.
    results = _run(_late_rank, 2)
    assert results[0] == "gave up"
    assert "rank 0 failed while rank 1 was late to a shared-memory all-reduce" in results[1]


def _limited(rank: int, world: int) -> Any:
    # 2 slots of CAPACITY bytes: above a tenth of a 100 KB worker, below one of 200 KB.
    names = [
        open_collectives(rank, world, CAPACITY, 30.0, True, limit).name
        for limit in (100_000, 200_000)
    ]
    return names


def test_a_file_above_a_tenth_of_the_worker_s_memory_limit_is_not_used() -> None:
    results = _run(_limited, 2)
    assert results[0] == results[1] == ["torch.distributed", "shared-memory"]


def test_a_slot_holds_the_concatenation_at_the_widest_dtype() -> None:
    # sync="average" concatenates parameters and buffers; bfloat16 with one float64 scalar
    # is float64 throughout, 4 times the bfloat16 bytes: it went through gloo, unsaid.
    tensors = [torch.zeros(1000, dtype=torch.bfloat16), torch.zeros((), dtype=torch.float64)]
    flat = torch.cat([t.reshape(-1) for t in tensors])
    assert capacity_for(tensors) >= flat.numel() * flat.element_size()


class _Counted(torch.nn.Module):
    """A model with an int16 buffer (gloo broadcasts no int16)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 1)
        self.register_buffer("seen", torch.zeros(2, dtype=torch.int16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen += 1
        return self.linear(x)


def _fails_late(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss; on rank 1's worker, raises at its fifth call."""
    from distributed import get_worker

    with contextlib.suppress(ValueError):
        worker = get_worker()
        worker.calls = getattr(worker, "calls", 0) + 1
        if worker.name == 1 and worker.calls == 5:
            raise RuntimeError("a bug in the loss")
    return _mse(out, target)


def _shm_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(_shm.PREFIX in line for line in f)


@pytest.mark.cluster
def test_int16_buffers_train_and_a_failed_job_leaves_nothing_mapped(fresh_cluster: Any) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6)).astype(np.float32)
    y = X[:, 0].copy()
    with Client(fresh_cluster, set_as_default=False) as client:
        for shared in (True, False):
            with dask.config.set({_shm.CONFIG_KEY: shared}):
                fitted = DataParallelTrainer(
                    _Counted, _mse, _sgd, epochs=2, batch_size=10, n_workers=2,
                    client=client, checkpoint_every=None, random_state=0,
                ).fit(X, y)  # fmt: skip
            assert fitted.transport_ == ("shared-memory" if shared else "gloo")
            assert fitted.model_.seen.tolist() == [20, 20]  # 10 steps an epoch, rank 0's
        with pytest.raises(TrainingError, match="a bug in the loss"):
            DataParallelTrainer(
                _mlp, _fails_late, _sgd, epochs=3, batch_size=10, n_workers=2,
                client=client, checkpoint_every=None,
            ).fit(X, y)  # fmt: skip
        time.sleep(1)  # the rank that waited ends within 20 ms of the failure
        assert client.run(_shm_mappings) == dict.fromkeys(client.run(_shm_mappings), 0)


def _lazy() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.LazyLinear(8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


@pytest.mark.cluster
def test_a_model_with_lazy_layers_trains_the_same_each_time(client: Client) -> None:
    # The driver saved the initial state with LazyLinear's parameters still shapeless: a
    # plain ValueError from torch, before any rank started.
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 6)).astype(np.float32)
    y = X[:, 0].copy()

    def fit() -> DataParallelTrainer:
        return DataParallelTrainer(
            _lazy, _mse, _sgd, epochs=2, batch_size=10, n_workers=2, client=client,
            checkpoint_every=None, random_state=3,
        ).fit(X, y)  # fmt: skip

    first, second = fit(), fit()
    assert first.model_[0].weight.shape == (8, 6)
    for a, b in zip(first.model_.parameters(), second.model_.parameters(), strict=True):
        assert torch.equal(a, b)
    assert first.history_[-1]["loss"] < first.history_[0]["loss"]


def test_an_op_a_failed_peer_had_finished_stands_and_the_next_one_fails(tmp_path: Any) -> None:
    # Rank 0 arrived first, but saw rank 1's arrival only after rank 1 had finished the op
    # and failed at its next step: raising there lost the checkpoint of the epoch that op
    # ended (a suite run: "the last checkpoint is of epoch 1" where rank 1 failed in
    # epoch 3). Two ranks' views of one file, in this process, stepped by hand.
    size = 2 * (_shm.ROW + CAPACITY)
    path = str(tmp_path / "collectives")
    first = _shm._create(path, size)
    second = mmap.mmap(os.open(path, os.O_RDWR), size)
    for mm in (first, second):
        rows = np.frombuffer(mm, dtype=np.int64, count=2 * _shm.ROW // 8).reshape(2, -1)
        rows[:, 1], rows[:, 2] = os.getpid(), _shm._process_start(os.getpid())
        del rows
    zero = _shm.SharedMemoryCollectives(first, 0, 2, CAPACITY, 30.0)
    one = _shm.SharedMemoryCollectives(second, 1, 2, CAPACITY, 30.0)
    t0, t1 = torch.full((3,), 1.0), torch.full((3,), 2.0)
    zero._slot(0, t0).copy_(t0)
    zero.counters[0] = 1  # rank 0 arrived at op 0...
    one.all_reduce(t1)  # ...rank 1 finished it...
    one.close(failed=True)  # ...and failed at its next step
    zero.all_reduce(t0)  # rank 0 sees it all only now: the op stands
    assert t0.tolist() == t1.tolist() == [3.0] * 3
    with pytest.raises(GangError, match="rank 1 failed while rank 0 waited for it"):
        zero.all_reduce(t0)
    zero.close(failed=True)
