"""Data-parallel training: plain single-process torch vs DataParallelTrainer on 2 workers.

What is measured
    An MLP (64 -> 128 -> 128 -> 2, ReLU, cross-entropy, SGD lr 0.05 momentum 0.9) on
    synthetic data: ``--rows`` x 64 float32 features (default 200,000), labels from a
    random linear rule with 10% of them flipped; ``--epochs`` epochs (default 3), global
    batch ``--global-batch`` (default 256), shuffled each epoch, the same initial weights (``torch.manual_seed(0)``).
    Approaches, run one after the other in each of ``--repeats`` rounds:

    * ``plain``: one process (this driver) with ``torch.set_num_threads(1)``, the global
      batch;
    * ``allreduce``: ``DataParallelTrainer(sync="allreduce", n_workers=2,
      batch_size=global batch / 2)`` on a 2-worker single-thread LocalCluster (gradients averaged every
      step, one flat-buffer all-reduce; DDP before 2026-12-04), through shared memory (the
      ranks share this host; since 2026-12-07);
    * ``allreduce, gloo``: the same with Dask's config ``dmlsearch.training.shared-memory:
      false``: every all-reduce over gloo's TCP, as before 2026-12-07;
    * ``average K=8``: the same as ``allreduce`` with ``sync="average", average_every=8`` (local SGD);
    * ``torch DDP``: the users' alternative without Dask, what ``torchrun`` would start: 2
      processes (``torch.multiprocessing``, spawned once per round), gloo on 127.0.0.1,
      ``DistributedDataParallel`` with its default all-reduce, each rank on its contiguous
      half of the rows with batch global / 2, 1 thread each.

    Reported per approach (median over the rounds): the fit's wall time (for the trainer:
    gang reservation, scatter of the shards, rendezvous and the ranks' epochs), epoch
    throughput (rows per second, mean over the epochs after the first; the trainer's from
    ``history_``), throughput relative to ``plain`` (``x plain``: the ratio of the
    medians; ``paired``: the median of each round's ratio to plain in that round), seconds in synchronising collectives
    and rounds per epoch, the last epoch's mean training loss, and the accuracy of the
    final model on all rows.

Rerun
    python experiments/benchmarks/training.py                 # 200k rows, 3 epochs, 3 rounds
    python experiments/benchmarks/training.py --quick         # 40k rows, 2 epochs, 1 round
    python experiments/benchmarks/training.py --global-batch 1024  # fewer, larger steps
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from typing import Any

import dask
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _common import local_cluster, median, print_footer, print_header, print_table, timer
from distributed import Client

from dmlsearch.training import DataParallelTrainer

FEATURES, HIDDEN, LR = 64, 128, 0.05
GLOBAL_BATCH = 256  # --global-batch sets it


def model_fn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 2),
    )


def optimizer_fn(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=LR, momentum=0.9)


def make_data(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    y = (X @ rng.normal(size=FEATURES) > 0).astype(np.int64)
    flip = rng.random(rows) < 0.1
    y[flip] = 1 - y[flip]
    return X, y


def accuracy(model: torch.nn.Module, X: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(X)).argmax(1).numpy() == y).mean())


def run_plain(X: np.ndarray, y: np.ndarray, epochs: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = model_fn()
    opt = optimizer_fn(model.parameters())
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    steps = len(X) // GLOBAL_BATCH
    rng = np.random.default_rng(1)
    throughput, losses = [], []
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(X)))
        started, total = time.perf_counter(), 0.0
        for t in range(steps):
            rows = order[t * GLOBAL_BATCH : (t + 1) * GLOBAL_BATCH]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(Xt[rows]), yt[rows])
            loss.backward()
            opt.step()
            total += float(loss.detach())
        throughput.append(steps * GLOBAL_BATCH / (time.perf_counter() - started))
        losses.append(total / steps)
    return {
        "throughput": float(np.mean(throughput[1:] or throughput)),
        "loss": losses[-1],
        "accuracy": accuracy(model, X, y),
        "sync_s": 0.0,
        "rounds": 0,
    }


def _ddp_rank(
    rank: int,
    world: int,
    port: int,
    X: np.ndarray,
    y: np.ndarray,
    epochs: int,
    batch: int,
    out: Any,
) -> None:
    """One rank of plain torch DDP (spawned by :func:`run_torch_ddp`)."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(model_fn())
        opt = optimizer_fn(model.parameters())
        lo, hi = rank * len(X) // world, (rank + 1) * len(X) // world
        Xt, yt = torch.from_numpy(X[lo:hi].copy()), torch.from_numpy(y[lo:hi].copy())
        steps = (hi - lo) // batch
        rng = np.random.default_rng([1, rank])
        throughput, losses = [], []
        for _ in range(epochs):
            order = torch.from_numpy(rng.permutation(hi - lo))
            started, total = time.perf_counter(), 0.0
            for t in range(steps):
                rows = order[t * batch : (t + 1) * batch]
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(Xt[rows]), yt[rows])
                loss.backward()
                opt.step()
                total += float(loss.detach())
            throughput.append(steps * batch * world / (time.perf_counter() - started))
            mean = torch.tensor([total / steps])
            dist.all_reduce(mean)
            losses.append(float(mean) / world)
        if rank == 0:
            # As NumPy arrays: a tensor would travel as a shared-memory handle, which
            # dies with this process before the driver reads it.
            state = {k: v.detach().numpy().copy() for k, v in model.module.state_dict().items()}
            out.put({"throughput": throughput, "loss": losses[-1], "state": state})
    finally:
        dist.destroy_process_group()


def run_torch_ddp(X: np.ndarray, y: np.ndarray, epochs: int) -> dict[str, Any]:
    """Plain torch DDP on 2 spawned processes, as torchrun would run it (no Dask)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    args = (2, port, X, y, epochs, GLOBAL_BATCH // 2, out)
    procs = [ctx.Process(target=_ddp_rank, args=(r, *args)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    model = model_fn()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in result["state"].items()})
    later = result["throughput"][1:] or result["throughput"]
    return {
        "throughput": float(np.mean(later)),
        "loss": result["loss"],
        "accuracy": accuracy(model, X, y),
        "sync_s": float("nan"),
        "rounds": len(X) // 2 // (GLOBAL_BATCH // 2),
    }


def run_trainer(
    client: Client, X: np.ndarray, y: np.ndarray, epochs: int, shm: bool = True, **params: Any
) -> dict[str, Any]:
    with dask.config.set({"dmlsearch.training.shared-memory": shm}):
        return _run_trainer(client, X, y, epochs, **params)


def _run_trainer(
    client: Client, X: np.ndarray, y: np.ndarray, epochs: int, **params: Any
) -> dict[str, Any]:
    trainer = DataParallelTrainer(
        model_fn,
        torch.nn.functional.cross_entropy,
        optimizer_fn,
        epochs=epochs,
        batch_size=GLOBAL_BATCH // 2,
        n_workers=2,
        random_state=0,
        client=client,
        checkpoint_every=None,
        **params,
    ).fit(X, y)
    later = trainer.history_[1:] or trainer.history_
    return {
        "throughput": float(np.mean([h["samples_per_s"] for h in later])),
        "loss": trainer.history_[-1]["loss"],
        "accuracy": accuracy(trainer.model_, X, y),
        "sync_s": float(np.mean([h["sync_s"] for h in later])),
        "rounds": trainer.history_[-1]["sync_rounds"],
        "transport": trainer.transport_,
    }


def paired(results: list[dict[str, Any]], plain: list[float]) -> list[float]:
    """Each round's throughput over plain torch's in the same round: the machine's speed
    drifts from round to round (plain's own rows/s moved by up to 40 % in one run), and a
    ratio within a round cancels that drift."""
    return [r["throughput"] / p for r, p in zip(results, plain, strict=True)]


def main(argv: list[str]) -> None:
    global GLOBAL_BATCH
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--global-batch", type=int, default=GLOBAL_BATCH)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv[1:])
    GLOBAL_BATCH = args.global_batch
    if args.quick:
        args.rows, args.epochs, args.repeats = 40_000, 2, 1
    print_header("data-parallel training: plain torch vs DataParallelTrainer", argv)
    print(
        f"data: {args.rows} x {FEATURES} float32, 2 classes; MLP {FEATURES}-{HIDDEN}-{HIDDEN}-2; "
        f"{args.epochs} epochs, global batch {GLOBAL_BATCH}, SGD lr {LR} momentum 0.9; "
        f"{args.repeats} round(s), approaches alternated in each; torch {torch.__version__}"
    )
    X, y = make_data(args.rows)
    approaches = {
        "plain (1 process, 1 thread)": lambda c: run_plain(X, y, args.epochs),
        "allreduce (2 workers)": lambda c: run_trainer(c, X, y, args.epochs, sync="allreduce"),
        "allreduce, gloo (2 workers)": lambda c: run_trainer(
            c, X, y, args.epochs, shm=False, sync="allreduce"
        ),
        "average K=8 (2 workers)": lambda c: run_trainer(
            c, X, y, args.epochs, sync="average", average_every=8
        ),
        "torch DDP (2 processes, no Dask)": lambda c: run_torch_ddp(X, y, args.epochs),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in approaches}
    with local_cluster(2) as client:
        run_trainer(client, X[:4096], y[:4096], 1)  # warm: torch imported on the workers
        for _ in range(args.repeats):
            for name, run in approaches.items():
                with timer() as wall:
                    result = run(client)
                runs[name].append({**result, "wall": wall[0]})
    plain = [r["throughput"] for r in runs["plain (1 process, 1 thread)"]]
    base = median(plain)
    rows = []
    for name, results in runs.items():

        def med(key: str, results: list[dict[str, Any]] = results) -> float:
            return median([r[key] for r in results])

        rows.append(
            [
                name,
                med("wall"),
                med("throughput"),
                med("throughput") / base,
                median(paired(results, plain)),
                med("sync_s"),
                int(med("rounds")),
                med("loss"),
                med("accuracy"),
            ]
        )
    print_table(
        [
            "approach",
            "fit s",
            "rows/s",
            "x plain",
            "paired",
            "sync s/epoch",
            "rounds/epoch",
            "loss",
            "accuracy",
        ],
        rows,
    )
    for name, results in runs.items():
        print(
            f"every round, {name}: "
            + "; ".join(
                f"fit {r['wall']:.2f} s, {r['throughput']:,.0f} rows/s, loss {r['loss']:.4f}"
                + (f", over {r['transport']}" if "transport" in r else "")
                for r in results
            )
            + "; x plain per round: "
            + " ".join(f"{v:.2f}" for v in paired(results, plain))
        )
    print_footer()


if __name__ == "__main__":
    main(sys.argv)
