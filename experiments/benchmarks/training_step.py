"""The cost of one data-parallel training step, taken apart (no dmlsearch code involved).

What is measured
    The MLP of ``training.py`` (64 -> 128 -> 128 -> 2, SGD with momentum, 1 thread per
    process) on a fixed batch of ``b`` rows per rank, 2 ranks over gloo on 127.0.0.1:

    * ``plain``: forward, backward and step on one rank alone (no communication);
    * ``ddp``: the same step under ``DistributedDataParallel`` (its default all-reduce);
    * ``ddp_view``: DDP with ``gradient_as_bucket_view=True``;
    * ``manual``: gradients in one flat buffer, one ``all_reduce`` after backward;
    * ``allreduce``: the all-reduce of a buffer of the model's size alone.

    Each in ms per step, median of 5 x 300 steps after 50 warm-up steps, first in two
    standalone processes (what ``torchrun`` would start), then in two Dask worker
    processes (LocalCluster, 1 thread each; worker profiling as Dask's default). The
    ratio that bounds any data-parallel speed-up on this model: 2 x ``plain`` at ``b`` rows
    against ``ddp`` at ``b`` rows per rank.

Rerun
    python experiments/benchmarks/training_step.py
"""

from __future__ import annotations

import socket
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

BATCHES = (128, 512)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 2),
    )


def bench(fn: Callable[[], None], n: int = 300) -> float:
    for _ in range(50):
        fn()
    times = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - started) / n * 1e3)
    return round(statistics.median(times), 3)


def sgd(m: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)


def steps(rank: int, world: int, batch: int, port: int) -> dict[str, float]:
    """All the variants on one rank (every rank runs this; rank 0's figures are kept)."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    X, y = torch.randn(batch, 64), torch.randint(0, 2, (batch,))
    loss = torch.nn.functional.cross_entropy

    def step(m: torch.nn.Module, opt: torch.optim.Optimizer) -> Callable[[], None]:
        def run() -> None:
            opt.zero_grad()
            loss(m(X), y).backward()
            opt.step()

        return run

    plain = model()
    ddp = DistributedDataParallel(model())
    view = DistributedDataParallel(model(), gradient_as_bucket_view=True)
    manual = model()
    manual_opt = sgd(manual)
    params = list(manual.parameters())
    flat = torch.zeros(sum(p.numel() for p in params))
    offset = 0
    for p in params:  # the gradients live in one buffer: one collective a step
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()

    def manual_step() -> None:
        flat.zero_()
        loss(manual(X), y).backward()
        dist.all_reduce(flat)
        flat.div_(world)
        manual_opt.step()

    buffer = torch.zeros(flat.numel())
    try:
        return {
            "plain": bench(step(plain, sgd(plain))),
            "ddp": bench(step(ddp, sgd(ddp))),
            "ddp_view": bench(step(view, sgd(view))),
            "manual": bench(manual_step),
            "allreduce": bench(lambda: dist.all_reduce(buffer)),
        }
    finally:
        dist.destroy_process_group()


def _spawned(rank: int, world: int, batch: int, port: int, out: Any) -> None:
    result = steps(rank, world, batch, port)
    if rank == 0:
        out.put(result)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main(argv: list[str]) -> None:
    import torch.multiprocessing as mp
    from _common import print_footer, print_header
    from distributed import Client, LocalCluster

    print_header("one data-parallel training step, taken apart", argv, n_workers=None)
    print(f"torch {torch.__version__}; ms per step, 2 ranks, 1 thread each")
    for batch in BATCHES:
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=_spawned, args=(r, 2, batch, port, out)) for r in range(2)]
        for p in procs:
            p.start()
        result = out.get(timeout=300)
        for p in procs:
            p.join(timeout=60)
        print(f"standalone 2 ranks, batch {batch}/rank: {result} ms/step", flush=True)
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = sorted(client.scheduler_info()["workers"])
        for batch in BATCHES:
            port = client.submit(free_port, workers=[workers[0]], pure=False).result()
            futures = [
                client.submit(
                    steps, r, 2, batch, port, workers=[w], allow_other_workers=False, pure=False
                )
                for r, w in enumerate(workers)
            ]
            print(f"in Dask workers 2 ranks, batch {batch}/rank: {futures[0].result()} ms/step")
    print_footer()


if __name__ == "__main__":
    main(sys.argv)
