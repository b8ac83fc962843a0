"""sync="allreduce" without DistributedDataParallel: the same training as DDP, and no
sockets left open in the workers after a job (docs/training.md)."""

from __future__ import annotations

import itertools
import multiprocessing
import socket
import sys
import time
from typing import Any

import cloudpickle
import numpy as np
import psutil
import pytest
import torch
import torch.distributed as dist
from distributed import Client, LocalCluster

from dmlsearch.training import DataParallelTrainer
from dmlsearch.training._shm import Collectives, _host_supports, capacity_for, open_collectives
from dmlsearch.training._sync import GradientAllReduce

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.cluster

D, B, STEPS = 4, 6, 5


class Net(torch.nn.Module):
    """BatchNorm (buffers), a branch only rows flagged in column 0 take (used on rank 1
    only) and a layer no rank uses."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(D, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )
        self.extra = torch.nn.Linear(D, 1)
        self.never = torch.nn.Linear(D, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(x)
        flagged = x[:, :1] > 0
        if bool(flagged.any()):
            out = out + flagged * self.extra(x)
        return out


def _batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(100 + rank)
    batches = []
    for _ in range(STEPS):
        x = torch.randn(B, D, generator=gen)
        x[:, 0] = -1.0 if rank == 0 else torch.rand(B, generator=gen) - 0.5
        batches.append((x, torch.randn(B, 1, generator=gen)))
    return batches


def _train(rank: int, how: str) -> dict[str, Any]:
    """Train a Net (rank r built from seed r) with DDP or the trainer's all-reduce, over
    torch.distributed ("dist") or shared memory ("shm")."""
    torch.manual_seed(rank)  # different weights per rank: the start broadcasts rank 0's
    model = Net()
    sync = None
    net: torch.nn.Module = model
    comm = Collectives()
    if how == "ddp":
        net = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    else:
        if how == "shm":
            capacity = capacity_for([*model.parameters(), *model.buffers()])
            comm = open_collectives(rank, 2, capacity, 30.0, True)
            assert comm.name == ("shared-memory" if _host_supports() else "torch.distributed")
        sync = GradientAllReduce(model, comm)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    for x, y in _batches(rank):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        if sync is not None:
            sync.after_backward()
        opt.step()
    state = {k: v.detach().clone().numpy() for k, v in model.state_dict().items()}
    comm.close(failed=False)
    return {"state": state, "never_grad": model.never.weight.grad is None}


def _rank(rank: int, port: int, out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        out.put((rank, {how: _train(rank, how) for how in ("dist", "shm", "ddp")}))
    finally:
        dist.destroy_process_group()


def test_allreduce_trains_as_ddp_with_buffers_and_unused_parameters() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    params = {name for name, _ in Net().named_parameters()}
    for rank, how in itertools.product((0, 1), ("dist", "shm")):
        ours, ddp = results[rank][how], results[rank]["ddp"]
        # Rank 0's parameters and buffers broadcast at the start, then the same steps. A
        # rank's buffers as DDP leaves them only on rank 0: DDP gives the others rank 0's
        # before each forward pass, the trainer after each step (the same at every
        # forward pass, not after the last step).
        for name, want in ddp["state"].items():
            if rank == 0 or name in params:
                np.testing.assert_allclose(
                    ours["state"][name], want, atol=1e-6, err_msg=f"{how} rank {rank}: {name}"
                )
        assert ours["never_grad"] and ddp["never_grad"]  # no rank used it: no weight decay
    zero, one = results[0]["dist"]["state"], results[1]["dist"]["state"]
    for name in zero:  # parameters in step; buffers rank 0's
        np.testing.assert_allclose(one[name], zero[name], atol=1e-6, err_msg=name)
        # Two ranks' sums are the same bits either way.
        for rank in (0, 1):
            assert np.array_equal(
                results[rank]["shm"]["state"][name], results[rank]["dist"]["state"][name]
            )
    torch.manual_seed(0)
    start = Net()
    assert np.array_equal(zero["never.weight"], start.never.weight.detach().numpy())
    assert not np.allclose(zero["extra.weight"], start.extra.weight.detach().numpy())
    assert int(zero["body.1.num_batches_tracked"]) == STEPS


def _listeners() -> list[tuple[str, int]]:
    """The TCP sockets listening in this (worker's) process."""
    return sorted(
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    )


def test_no_socket_stays_open_in_the_workers_after_an_allreduce_job(
    fresh_cluster: LocalCluster,
) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, D)).astype(np.float32)
    y = X.sum(axis=1, keepdims=True).astype(np.float32)
    with Client(fresh_cluster, set_as_default=False) as client:
        before = client.run(_listeners)  # the worker's own server and dashboard
        for _ in range(2):  # one job per fold, say
            DataParallelTrainer(
                lambda: torch.nn.Linear(D, 1),
                torch.nn.functional.mse_loss,
                lambda params: torch.optim.SGD(params, lr=0.1),
                epochs=1,
                batch_size=B,
                sync="allreduce",
                client=client,
                device="cpu",
            ).fit(X, y)
        # destroy_process_group has returned in every rank before fit returns; a closed
        # listener may take a moment to leave the kernel's table.
        deadline = time.monotonic() + 10
        while (after := client.run(_listeners)) != before and time.monotonic() < deadline:
            time.sleep(0.2)
    assert after == before, f"listening after the jobs (worker: [(ip, port)]): {after}"
