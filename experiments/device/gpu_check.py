"""DataParallelTrainer on a GPU (issue 11): a check to run ON a machine with an NVIDIA GPU.

Run it from the repository's root (it puts the root on ``sys.path`` and on the workers'
``PYTHONPATH``; dmlsearch need not be installed)::

    python3 experiments/device/gpu_check.py              # exits 1 on any FAIL
    bash experiments/device/gpu_check.sh [WHEEL_DIR]     # installs carried wheels first
    python3 experiments/device/gpu_check.py --allow-cpu  # a dry run without a GPU

It starts ``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)`` and runs:

a. ``device="cuda"``, 2 ranks, ``sync="allreduce"``, ``shuffle=False``, plain SGD: with one
   GPU the two ranks share ``cuda:0``, so the backend must be gloo (on CUDA tensors; with
   two GPUs or more, NCCL on ``cuda:0`` and ``cuda:1``). The weights must equal
   single-process SGD on CUDA whose batch t is the concatenation of the ranks' batches t
   (rank r holds rows ``[r*n//w, (r+1)*n//w)``, docs/training.md), to ``atol=1e-4``;
   ``model_`` and the checkpoint must be CPU tensors. Then
   ``device="auto"`` must pick CUDA, and (one GPU) ``backend="nccl"`` on 2 ranks must be
   refused (they share a GPU) before any rank starts.
b. 1 rank, ``backend="nccl"`` (world size 1 is legal for NCCL on one GPU): the same
   equality with single-process SGD on that rank's batches.
c. ``sync="average"`` (``average_every=1``: the same equality) and ``sync="ssp"``
   (``staleness=2``: finite loss, the staleness bound kept, parameter server on CPU) on
   CUDA, 1 epoch each.
d. Throughput of an MLP (64 -> 128 -> 128 -> 2, SGD with momentum) on 200,000 x 64 rows,
   3 epochs, global batch 256: 2 CPU ranks (gloo), 2 CUDA ranks on the one GPU (gloo),
   1 CUDA rank (NCCL). Prints the median rows/s over the epochs and the median sync
   seconds; informational (no speed threshold), PASS when every run finishes.

Prints the versions (Python, torch, CUDA, NCCL, dask, distributed) and ``nvidia-smi``'s
GPU name, then PASS or FAIL per part and an overall line. A watchdog ends the run (exit
1, with every thread's traceback) after ``--deadline`` seconds (default 225).

Needs: torch, numpy, dask, distributed, cloudpickle, and what ``import dmlsearch.training``
imports. Checked by running this script (``--allow-cpu``) with ``python -S`` on a folder
holding only these distributions (the workers too saw no site-packages):

* dask's and distributed's own: click, cloudpickle, fsspec, jinja2 (MarkupSafe), locket,
  msgpack, packaging, partd, psutil, pyyaml, sortedcontainers, tblib, toolz, tornado, zict
  (and importlib_metadata, only on Python < 3.12);
* dmlsearch's: scikit-learn (scipy, joblib, threadpoolctl, narwhals), SQLAlchemy
  (``dmlsearch.registry``, which the trainer imports for checkpoints and registration;
  it needs typing-extensions) and fsspec (the registry's artifact store).

Not needed: pandas, skorch, optuna, pydantic, rich, bokeh (no dashboard is started).
Of these, the nvidia-h200 image's package list (.library/device/KINDS.md) lacks dask,
distributed, partd, locket, tblib, tornado, zict and SQLAlchemy: carry those as wheels
(dask and distributed of one release; distributed pins dask's version).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# The workers are new processes: they find dmlsearch (and carried wheels) the same way.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
)

import numpy as np  # noqa: E402
import torch  # noqa: E402

N, D, B, SEED = 203, 5, 10, 7  # odd N: rank 1's shard starts at row N // 2
ATOL = 1e-4  # float32 on a GPU: reduction orders differ from the reference's
ROWS, FEATURES, HIDDEN, GLOBAL_BATCH = 200_000, 64, 128, 256


def model_fn() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1)


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out.squeeze(-1), target)


def mlp_fn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 2),
    )


def momentum_sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def small_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)).astype(np.float32)
    return X, (X @ rng.normal(size=D)).astype(np.float32)


def big_data(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels from a random linear rule, 10% of them flipped (experiments/benchmarks/training.py)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    y = (X @ rng.normal(size=FEATURES) > 0).astype(np.int64)
    flip = rng.random(rows) < 0.1
    y[flip] = 1 - y[flip]
    return X, y


def reference(X: np.ndarray, y: np.ndarray, world: int, epochs: int, device: str) -> list[Any]:
    """Single-process SGD on ``device``; step t's batch is the ranks' batches t, concatenated."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)  # the trainer's initial model: built on CPU under random_state
        model = model_fn()
    model.to(device)
    opt = sgd(model.parameters())
    Xt, yt = torch.from_numpy(X).to(device), torch.from_numpy(y).to(device)
    n = len(X)
    shards = [np.arange(r * n // world, (r + 1) * n // world) for r in range(world)]
    steps = (n // world) // B
    for _ in range(epochs):
        for t in range(steps):
            rows = torch.from_numpy(np.concatenate([s[t * B : (t + 1) * B] for s in shards]))
            opt.zero_grad()
            mse(model(Xt[rows.to(device)]), yt[rows.to(device)]).backward()
            opt.step()
    return [p.detach().cpu() for p in model.parameters()]


class Check:
    """The verdicts of one run: ``expect`` records a failed condition and goes on."""

    def __init__(self) -> None:
        self.results: list[tuple[str, bool, str]] = []
        self.failures: list[str] = []

    def expect(self, ok: bool, what: str) -> None:
        print(f"    {'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            self.failures.append(what)

    def part(self, name: str, fn: Callable[[], None]) -> None:
        print(f"\n== {name}", flush=True)
        self.failures = []
        started = time.perf_counter()
        try:
            fn()
        except Exception as exc:
            traceback.print_exc()
            self.failures.append(f"raised {type(exc).__name__}: {exc}")
        took = time.perf_counter() - started
        note = "; ".join(self.failures) if self.failures else f"{took:.1f} s"
        self.results.append((name, not self.failures, note))


def weights_match(check: Check, model: torch.nn.Module, expected: list[torch.Tensor]) -> None:
    got = [p.detach() for p in model.parameters()]
    check.expect(all(p.device.type == "cpu" for p in got), "model_ is on CPU")
    diff = max(float((a.cpu() - b).abs().max()) for a, b in zip(got, expected, strict=True))
    check.expect(
        diff <= ATOL, f"weights equal the single-process reference (max |diff| {diff:.2e})"
    )


def state_on_cpu(check: Check, fitted: Any) -> None:
    ckpt = fitted.checkpoint_
    check.expect(ckpt is not None, "a checkpoint was taken")
    if ckpt is not None:
        state = ckpt.load()
        tensors = list(state["model"].values())
        check.expect(all(t.device.type == "cpu" for t in tensors), "the checkpoint is CPU tensors")
        final = fitted.model_.state_dict()
        if ckpt.epoch == len(fitted.history_):
            same = all(torch.equal(state["model"][k], v) for k, v in final.items())
            check.expect(same, "the last checkpoint is model_")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow-cpu", action="store_true", help="dry run without a GPU")
    parser.add_argument("--deadline", type=float, default=225.0, help="seconds before the watchdog")
    parser.add_argument("--rows", type=int, default=ROWS, help="rows of the throughput part")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.deadline, exit=True)

    import dask
    import distributed
    from distributed import Client, LocalCluster

    from dmlsearch.exceptions import InvalidParameterError
    from dmlsearch.training import DataParallelTrainer

    has_gpu = torch.cuda.is_available()
    print("command: python3 " + " ".join(sys.argv))
    print(f"date: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
    print(f"host: {platform.node()}, {platform.machine()}, {os.cpu_count()} logical CPUs")
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    )
    print(f"dask {dask.__version__}, distributed {distributed.__version__}")
    nccl: Any = None
    if has_gpu:
        try:
            from torch.cuda import nccl as torch_nccl

            nccl = torch_nccl.version()
        except Exception as exc:  # informational only
            nccl = f"unknown ({type(exc).__name__})"
    print(f"cuda available {has_gpu}, devices {torch.cuda.device_count()}, NCCL {nccl}")
    if has_gpu:
        print(f"torch sees {torch.cuda.get_device_name(0)}")
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        print(f"nvidia-smi: {smi.stdout.strip() or smi.stderr.strip()}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"nvidia-smi: not run ({exc})")
    if not has_gpu and not args.allow_cpu:
        print("\nFAIL: torch sees no GPU here (use --allow-cpu for a dry run)")
        return 1
    cuda = "cuda" if has_gpu else "cpu"  # --allow-cpu: the same runs on CPU, nccl skipped
    gpus = torch.cuda.device_count()
    # The workers see the GPUs this process sees: with one, both ranks share it (gloo).
    two_ranks = (
        (cuda, "gloo" if gpus < 2 else "nccl", ["cuda:0", f"cuda:{min(gpus - 1, 1)}"])
        if has_gpu
        else ("cpu", "gloo", ["cpu", "cpu"])
    )
    check = Check()
    X, y = small_data()

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(2, timeout=60)

        def trainer(**kwargs: Any) -> DataParallelTrainer:
            params: dict[str, Any] = {
                "epochs": 2,
                "batch_size": B,
                "shuffle": False,
                "random_state": SEED,
                "client": client,
                "device": cuda,
                "timeout": 60.0,
            }
            return DataParallelTrainer(model_fn, mse, sgd, **{**params, **kwargs})

        def part_a() -> None:
            fitted = trainer(sync="allreduce").fit(X, y)
            got = (fitted.device_, fitted.backend_, fitted.rank_devices_)
            check.expect(got == two_ranks, f"device_, backend_, rank_devices_ = {got}")
            weights_match(check, fitted.model_, reference(X, y, 2, 2, cuda))
            state_on_cpu(check, fitted)
            check.expect(
                [h["sync_rounds"] for h in fitted.history_] == [(N // 2) // B] * 2,
                "one all-reduce round per step",
            )
            auto = trainer(device="auto", epochs=1).fit(X, y)
            check.expect(auto.device_ == cuda, f"device='auto' picks {auto.device_}")
            if gpus == 1:
                try:
                    trainer(backend="nccl").fit(X, y)
                    check.expect(False, "backend='nccl' on 2 ranks sharing a GPU is refused")
                except InvalidParameterError as exc:
                    check.expect("share a GPU" in str(exc), f"nccl refused: {exc}")

        def part_b() -> None:
            if not has_gpu:
                print("    (skipped: no GPU)")
                return
            fitted = trainer(n_workers=1, backend="nccl").fit(X, y)
            got = (fitted.device_, fitted.backend_, fitted.rank_devices_)
            check.expect(got == ("cuda", "nccl", ["cuda:0"]), f"device_, backend_ = {got}")
            weights_match(check, fitted.model_, reference(X, y, 1, 2, cuda))
            state_on_cpu(check, fitted)

        def part_c() -> None:
            avg = trainer(sync="average", average_every=1, epochs=1).fit(X, y)
            check.expect(avg.device_ == cuda, f"average: device_ {avg.device_}")
            weights_match(check, avg.model_, reference(X, y, 2, 1, cuda))
            state_on_cpu(check, avg)
            ssp = trainer(sync="ssp", staleness=2, epochs=1).fit(X, y)
            losses = [h["loss"] for h in ssp.history_]
            check.expect(ssp.device_ == cuda, f"ssp: device_ {ssp.device_}")
            check.expect(all(np.isfinite(losses)), f"ssp: finite loss {losses}")
            lag = max(h["max_lag"] for h in ssp.history_)
            check.expect(lag <= 3, f"ssp: largest clock difference {lag} <= staleness + 1")
            state_on_cpu(check, ssp)

        def part_d() -> None:
            Xb, yb = big_data(args.rows)
            runs = [("cpu, 2 ranks", "cpu", "auto", 2)]
            if has_gpu:
                runs += [
                    ("cuda, 2 ranks on 1 GPU", "cuda", "auto", 2),
                    ("cuda, 1 rank", "cuda", "nccl", 1),
                ]
            print(
                f"    {'ranks':<24} {'backend':<8} {'rows/s (median)':>16} {'sync s/epoch':>13} {'last loss':>10}"
            )
            for name, device, backend, w in runs:
                fitted = DataParallelTrainer(
                    mlp_fn,
                    torch.nn.functional.cross_entropy,
                    momentum_sgd,
                    epochs=3,
                    batch_size=GLOBAL_BATCH // w,
                    n_workers=w,
                    shuffle=True,
                    random_state=0,
                    client=client,
                    device=device,
                    backend=backend,
                    checkpoint_every=None,
                ).fit(Xb, yb)
                rate = statistics.median(h["samples_per_s"] for h in fitted.history_)
                sync = statistics.median(h["sync_s"] for h in fitted.history_)
                loss = fitted.history_[-1]["loss"]
                print(
                    f"    {name:<24} {fitted.backend_:<8} {rate:>16,.0f} {sync:>13.2f} {loss:>10.3f}"
                )
                check.expect(
                    bool(np.isfinite(loss)) and loss < 0.69, f"{name}: loss {loss:.3f} < ln 2"
                )

        check.part("a: 2 ranks on one GPU, allreduce (gloo on CUDA)", part_a)
        check.part("b: 1 rank, NCCL", part_b)
        check.part("c: average and ssp on CUDA", part_c)
        check.part("d: throughput, MLP on 200k x 64", part_d)

    print("\n== summary")
    for name, ok, note in check.results:
        print(f"{'PASS' if ok else 'FAIL'}  {name}  ({note})")
    passed = all(ok for _, ok, _ in check.results)
    print("ALL PASS" if passed else "SOME FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
