"""Where DataParallelTrainer's ranks compute: the device/backend plan (pure), the probe, and
checkpoints that a driver without a GPU can load. The GPU runs themselves are checked by
experiments/device/gpu_check.py on a machine with one."""

from __future__ import annotations

import pytest
import torch
from distributed import Client

from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.training._checkpoint import state_bytes, state_from_bytes
from dmlsearch.training._device import (
    DevicePlan,
    WorkerDevices,
    check_device_params,
    plan_devices,
    probe_workers,
)

W2 = ["tcp://10.0.0.1:1", "tcp://10.0.0.1:2"]
NO_GPU = WorkerDevices()


def gpus(*uuids: str, nccl: bool = True) -> WorkerDevices:
    return WorkerDevices(uuids, tuple(f"GPU {u}" for u in uuids), nccl)


def test_no_gpu_gives_cpu_and_gloo_for_auto_and_cpu() -> None:
    for device in ("auto", "cpu"):
        plan = plan_devices(device, "auto", [NO_GPU, NO_GPU], W2)
        assert plan == DevicePlan("cpu", "gloo", ("cpu", "cpu"))
    # "cpu" asks nothing of the workers: their answers are not read.
    assert plan_devices("cpu", "gloo", [], W2).rank_devices == ("cpu", "cpu")


def test_a_distinct_gpu_per_rank_gives_nccl() -> None:
    # Both workers of a host see GPUs A and B: rank r takes the r-th (position mod count).
    plan = plan_devices("auto", "auto", [gpus("A", "B"), gpus("A", "B")], W2)
    assert (plan.device, plan.backend, plan.rank_devices) == ("cuda", "nccl", ("cuda:0", "cuda:1"))
    assert plan.gpu_names == ("GPU A", "GPU B")
    # Each worker sees its own GPU first (CUDA_VISIBLE_DEVICES rotated per worker).
    plan = plan_devices("cuda", "auto", [gpus("A", "B"), gpus("B", "A")], W2)
    assert (plan.backend, plan.rank_devices) == ("nccl", ("cuda:0", "cuda:0"))
    # One GPU per worker, on two hosts.
    assert plan_devices("auto", "nccl", [gpus("A"), gpus("B")], W2).backend == "nccl"


def test_ranks_sharing_a_gpu_use_gloo_on_cuda() -> None:
    plan = plan_devices("auto", "auto", [gpus("A"), gpus("A")], W2)
    assert plan == DevicePlan("cuda", "gloo", ("cuda:0", "cuda:0"), ("GPU A", "GPU A"))
    # Three ranks on two GPUs: round robin, and one GPU is shared.
    three = [gpus("A", "B")] * 3
    plan = plan_devices("cuda", "auto", three, [*W2, "tcp://10.0.0.1:3"])
    assert (plan.backend, plan.rank_devices) == ("gloo", ("cuda:0", "cuda:1", "cuda:0"))
    # A torch without NCCL on a worker: gloo even with a GPU per rank.
    assert plan_devices("auto", "auto", [gpus("A"), gpus("B", nccl=False)], W2).backend == "gloo"


def test_explicit_nccl_without_a_gpu_of_its_own_per_rank_is_an_error() -> None:
    with pytest.raises(InvalidParameterError, match="ranks 0, 1 share a GPU") as info:
        plan_devices("cuda", "nccl", [gpus("A"), gpus("A")], W2)
    assert info.value.param == "backend"
    with pytest.raises(InvalidParameterError, match=r"torch on tcp://10\.0\.0\.1:2 has no NCCL"):
        plan_devices("cuda", "nccl", [gpus("A"), gpus("B", nccl=False)], W2)
    with pytest.raises(InvalidParameterError, match="'nccl' needs a GPU on every rank's worker"):
        plan_devices("auto", "nccl", [gpus("A"), NO_GPU], W2)
    with pytest.raises(InvalidParameterError, match="'nccl' runs on GPUs only"):
        check_device_params("cpu", "nccl")
    # Explicit gloo is always allowed.
    assert plan_devices("cuda", "gloo", [gpus("A"), gpus("B")], W2).backend == "gloo"


def test_cuda_needs_a_gpu_on_every_worker_and_auto_then_falls_back_to_cpu() -> None:
    probes = [gpus("A"), NO_GPU]
    with pytest.raises(InvalidParameterError, match=r"10\.0\.0\.1:2 see none") as info:
        plan_devices("cuda", "auto", probes, W2)
    assert info.value.param == "device"
    assert plan_devices("auto", "auto", probes, W2) == DevicePlan("cpu", "gloo", ("cpu", "cpu"))


@pytest.mark.parametrize(
    ("device", "backend", "param"), [("gpu", "auto", "device"), ("auto", "mpi", "backend")]
)
def test_unknown_device_or_backend(device: str, backend: str, param: str) -> None:
    with pytest.raises(InvalidParameterError, match="expected one of") as info:
        check_device_params(device, backend)
    assert info.value.param == param


@pytest.mark.cluster
def test_the_probe_reports_what_each_worker_sees(client: Client) -> None:
    workers = sorted(client.scheduler_info()["workers"])
    probes = probe_workers(client, workers)
    assert len(probes) == len(workers)
    # The workers are processes of this machine, seeing what this process sees.
    assert [len(p.uuids) for p in probes] == [torch.cuda.device_count()] * len(workers)


def test_checkpoint_state_is_host_memory_and_keeps_module_versions() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    state = state_from_bytes(state_bytes(1, model, opt))
    assert all(t.device.type == "cpu" for t in state["model"].values())
    assert state["model"]._metadata == model.state_dict()._metadata  # BatchNorm's version
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    fresh.load_state_dict(state["model"])
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    fresh_opt.load_state_dict(state["optimizer"])
    for a, b in zip(fresh.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    got, want = fresh_opt.state_dict()["state"], opt.state_dict()["state"]
    assert sorted(got) == sorted(want) == [0, 1, 2, 3]
    for i in want:
        assert torch.equal(got[i]["momentum_buffer"], want[i]["momentum_buffer"])
