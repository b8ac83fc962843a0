"""Synchronisation models with a straggler: BSP vs SSP(s) vs fully asynchronous training.

What is measured
    The MLP of ``training.py`` (64 -> 128 -> 128 -> 2, SGD lr 0.05 momentum 0.9) on
    ``--rows`` x 64 synthetic rows (default 50,000), ``--epochs`` epochs (default 6),
    batch 128 per rank, on 2 single-thread workers, where the rank on worker ``1`` is
    **slowed 2x**: its module sleeps, before each forward pass, as long as one training
    step of a 128-row batch took on one thread in this process (measured first, median of
    200 steps). Approaches, one after the other in each of ``--repeats`` rounds:

    * ``BSP``: ``DataParallelTrainer(sync="allreduce")``: every step waits for both ranks;
    * ``SSP s=4``: ``sync="ssp", staleness=4``: a parameter server on a Dask actor; the fast
      rank runs at most 4 steps ahead of the slow one;
    * ``async``: ``sync="ssp", staleness=None``: no bound at all;
    * ``BSP, no straggler``: allreduce without the slowed rank, for reference.

    Reported per approach (median over the rounds): fit wall time; seconds per epoch (rank
    0's, from ``history_``); the **time to the target loss**, the cumulative epoch seconds
    until the first epoch whose mean training loss is at or below the target; the final
    epoch's loss and the accuracy of the final model on all rows. The target is 1.02 x the
    final epoch loss of the straggler-free BSP run of the same round (so "reached" means
    within 2% of what synchronous training without a straggler gets to).

Rerun
    python experiments/benchmarks/training_stragglers.py            # 50k rows, 6 epochs, 2 rounds
    python experiments/benchmarks/training_stragglers.py --quick    # 10k rows, 3 epochs, 1 round
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import cloudpickle
import numpy as np
import torch
import training
from _common import local_cluster, median, print_footer, print_header, print_table, timer
from distributed import Client
from training import accuracy, make_data, model_fn, optimizer_fn

from dmlsearch.training import DataParallelTrainer

# The workers cannot import this folder's modules: send training's functions by value.
cloudpickle.register_pickle_by_value(training)

BATCH = 128
SLOW_WORKER = 1  # LocalCluster names its workers 0, 1, ...


class Straggler(torch.nn.Module):
    """Wraps a module; on the Dask worker named ``slow_worker`` each forward sleeps first."""

    def __init__(self, inner: torch.nn.Module, delay: float, slow_worker: Any) -> None:
        super().__init__()
        self.inner = inner
        self.delay = delay
        self.slow_worker = slow_worker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay > 0 and _worker_name() == self.slow_worker:
            time.sleep(self.delay)
        out: torch.Tensor = self.inner(x)
        return out


def _worker_name() -> Any:
    try:
        from distributed import get_worker

        return get_worker().name
    except ValueError:  # on the driver: never slowed
        return None


def step_seconds(X: np.ndarray, y: np.ndarray) -> float:
    """One training step of a BATCH-row batch on one thread (median of 200)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = model_fn()
    opt = optimizer_fn(model.parameters())
    Xt, yt = torch.from_numpy(X[:BATCH]), torch.from_numpy(y[:BATCH])
    times = []
    for _ in range(220):
        started = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(Xt), yt).backward()
        opt.step()
        times.append(time.perf_counter() - started)
    return float(np.median(times[20:]))


def run(
    client: Client, X: np.ndarray, y: np.ndarray, epochs: int, delay: float, **params: Any
) -> dict[str, Any]:
    def slowed_model() -> torch.nn.Module:
        return Straggler(model_fn(), delay, SLOW_WORKER)

    trainer = DataParallelTrainer(
        slowed_model,
        torch.nn.functional.cross_entropy,
        optimizer_fn,
        epochs=epochs,
        batch_size=BATCH,
        n_workers=2,
        random_state=0,
        client=client,
        checkpoint_every=None,
        **params,
    )
    with timer() as wall:
        trainer.fit(X, y)
    return {
        "wall": wall[0],
        "losses": [h["loss"] for h in trainer.history_],
        "seconds": [h["seconds"] for h in trainer.history_],
        "accuracy": accuracy(trainer.model_, X, y),
    }


def time_to(result: dict[str, Any], target: float) -> float:
    """Cumulative epoch seconds to the first epoch at or below ``target`` (nan: never)."""
    elapsed = 0.0
    for loss, seconds in zip(result["losses"], result["seconds"], strict=True):
        elapsed += seconds
        if loss <= target:
            return elapsed
    return float("nan")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv[1:])
    if args.quick:
        args.rows, args.epochs, args.repeats = 10_000, 3, 1
    print_header("synchronisation models with one rank slowed 2x", argv)
    X, y = make_data(args.rows)
    delay = step_seconds(X, y)
    print(
        f"data: {args.rows} x 64 float32; MLP 64-128-128-2; {args.epochs} epochs, batch "
        f"{BATCH} per rank, 2 ranks; rank on worker {SLOW_WORKER} sleeps {delay * 1e3:.3f} ms "
        f"before each forward (one measured 1-thread step); {args.repeats} round(s), "
        f"approaches alternated in each; torch {torch.__version__}"
    )
    approaches: dict[str, tuple[float, dict[str, Any]]] = {
        "BSP, no straggler": (0.0, {"sync": "allreduce"}),
        "BSP (allreduce)": (delay, {"sync": "allreduce"}),
        "SSP s=4": (delay, {"sync": "ssp", "staleness": 4}),
        "async (ssp, no bound)": (delay, {"sync": "ssp", "staleness": None}),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in approaches}
    with local_cluster(2) as client:
        run(client, X[:4096], y[:4096], 1, 0.0)  # warm: torch imported on the workers
        for _ in range(args.repeats):
            round_results = {
                name: run(client, X, y, args.epochs, d, **params)
                for name, (d, params) in approaches.items()
            }
            target = 1.02 * round_results["BSP, no straggler"]["losses"][-1]
            for name, result in round_results.items():
                result["target"] = target
                result["time_to_target"] = time_to(result, target)
                runs[name].append(result)
    rows = []
    for name, results in runs.items():
        rows.append(
            [
                name,
                median([r["wall"] for r in results]),
                median([float(np.mean(r["seconds"])) for r in results]),
                median([r["time_to_target"] for r in results]),
                sum(np.isfinite(r["time_to_target"]) for r in results),
                median([r["losses"][-1] for r in results]),
                median([r["accuracy"] for r in results]),
            ]
        )
    print_table(
        [
            "approach",
            "fit s",
            "s/epoch",
            "s to target",
            "rounds reaching it",
            "final loss",
            "accuracy",
        ],
        rows,
    )
    for name, results in runs.items():
        for i, r in enumerate(results):
            curve = ", ".join(
                f"{loss:.4f}@{s:.1f}s" for loss, s in zip(r["losses"], r["seconds"], strict=True)
            )
            print(f"round {i}, {name}: target {r['target']:.4f}; loss@epoch seconds: {curve}")
    print_footer()


if __name__ == "__main__":
    main(sys.argv)
