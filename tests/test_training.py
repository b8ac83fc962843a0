"""DataParallelTrainer on real process clusters: equivalence, validation, checkpoints, faults."""

from __future__ import annotations

import importlib.metadata
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import cloudpickle
import dask.array as da
import numpy as np
import pytest
import torch
from distributed import Client, futures_of
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from dmlsearch._recording import data_fingerprint
from dmlsearch.exceptions import InvalidParameterError, TrainingError
from dmlsearch.registry import Registry
from dmlsearch.runner.gang import METADATA_KEY, alive_workers
from dmlsearch.testing import local_cluster
from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema
from dmlsearch.training import DataParallelTrainer
from dmlsearch.training import _data as training_data

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.cluster

N, D, B, SEED = 203, 5, 10, 7  # odd N: rank 1's shard starts at row N // 2
#: Errors that only a cluster without GPUs raises (the probe finds none).
NEEDS_NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="the workers see a GPU")


def model_fn() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1)


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out.squeeze(-1), target)


def fails_on_workers(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss, on the driver's trial batch; raises on a worker (in a rank)."""
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return mse(out, target)
    raise RuntimeError("a bug in the loss")


def not_a_module() -> Any:
    return "a string"


def _pid() -> int:
    return os.getpid()


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)).astype(np.float32)
    return X, (X @ rng.normal(size=D)).astype(np.float32)


def trainer(client: Any, **kwargs: Any) -> DataParallelTrainer:
    params: dict[str, Any] = {
        "model_fn": model_fn,
        "loss_fn": mse,
        "optimizer_fn": sgd,
        "epochs": 2,
        "batch_size": B,
        "shuffle": False,
        "random_state": SEED,
        "client": client,
        # The references below are float32 CPU SGD: on a machine with GPUs "auto" would
        # train on cuda, so the tests pin the device; "auto" is checked on its own.
        "device": "cpu",
    }
    return DataParallelTrainer(**{**params, **kwargs})


def initial_model() -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        return model_fn()


def local_sgd(X: np.ndarray, y: np.ndarray, epochs: int, every: int | None) -> list[torch.Tensor]:
    """Two ranks simulated in one process; ``every=None``: one model on the ranks' batches."""
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    shards = [range(0, N // 2), range(N // 2, N)]
    steps = (N // 2) // B
    models = [initial_model() for _ in range(1 if every is None else 2)]
    opts = [sgd(m.parameters()) for m in models]
    for _ in range(epochs):
        for t in range(steps):
            batches = [np.asarray(s[t * B : (t + 1) * B]) for s in shards]
            if every is None:  # the gradient of the mean loss over both ranks' batches
                batches = [np.concatenate(batches)]
            for m, o, rows in zip(models, opts, batches, strict=True):
                o.zero_grad()
                mse(m(Xt[rows]), yt[rows]).backward()
                o.step()
            if every is not None and ((t + 1) % every == 0 or t == steps - 1):
                with torch.no_grad():
                    for ps in zip(*(m.parameters() for m in models), strict=True):
                        mean = sum(p.data for p in ps) / 2
                        for p in ps:
                            p.data.copy_(mean)
    return [p.detach() for p in models[0].parameters()]


def assert_weights(model: torch.nn.Module, expected: list[torch.Tensor]) -> None:
    for got, want in zip(model.parameters(), expected, strict=True):
        np.testing.assert_allclose(got.detach().numpy(), want.numpy(), atol=1e-5)


def test_allreduce_equals_single_process_sgd_on_concatenated_batches(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    fitted = trainer(client, sync="allreduce").fit(*data)
    assert_weights(fitted.model_, local_sgd(*data, epochs=2, every=None))
    assert fitted.n_workers_ == 2
    assert [h["epoch"] for h in fitted.history_] == [1, 2]
    assert all(h["sync_rounds"] == (N // 2) // B for h in fitted.history_)
    assert fitted.history_[1]["loss"] < fitted.history_[0]["loss"]
    assert client.get_metadata(METADATA_KEY, default={}) == {}
    assert (fitted.device_, fitted.backend_, fitted.rank_devices_) == (
        "cpu",
        "gloo",
        ["cpu", "cpu"],
    )
    if not torch.cuda.is_available():  # "auto" on workers without a GPU: gloo on CPU
        auto = trainer(client, device="auto", backend="auto").fit(*data)
        assert (auto.device_, auto.backend_) == ("cpu", "gloo")
        for a, b in zip(auto.model_.parameters(), fitted.model_.parameters(), strict=True):
            assert torch.equal(a, b)


def test_average_every_step_equals_allreduce_and_every_k_is_local_sgd(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    every_step = trainer(client, sync="average", average_every=1).fit(*data)
    assert_weights(every_step.model_, local_sgd(*data, epochs=2, every=None))
    every_3 = trainer(client, sync="average", average_every=3).fit(*data)
    assert_weights(every_3.model_, local_sgd(*data, epochs=2, every=3))
    # 10 steps an epoch: averaged after steps 3, 6, 9 and at the epoch's end.
    assert [h["sync_rounds"] for h in every_3.history_] == [4, 4]


@pytest.mark.parametrize("staleness", [0, 2, None])
def test_ssp_keeps_ranks_within_the_staleness_bound(
    client: Client, data: tuple[np.ndarray, np.ndarray], staleness: int | None
) -> None:
    fitted = trainer(client, sync="ssp", staleness=staleness, epochs=3).fit(*data)
    losses = [h["loss"] for h in fitted.history_]
    assert losses[-1] < losses[0]
    if staleness is not None:
        # A rank starts step c only while c - (slowest clock) <= staleness.
        assert max(h["max_lag"] for h in fitted.history_) <= staleness + 1
    assert fitted.checkpoint_ is not None and fitted.checkpoint_.epoch == 3
    final = fitted.checkpoint_.load()["model"]
    for name, value in fitted.model_.state_dict().items():
        assert torch.equal(final[name], value)


class _FrozenBodyWithNorm(torch.nn.Module):
    """A frozen layer, an unused one and a BatchNorm: what fine-tuning models hold."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(D, 8).requires_grad_(False)
        self.norm = torch.nn.BatchNorm1d(8)
        self.unused = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.body(x)))


def test_ssp_leaves_parameters_without_gradients_and_keeps_the_ranks_buffers(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    fitted = trainer(client, model_fn=_FrozenBodyWithNorm, sync="ssp", epochs=2).fit(X + 20, y)
    torch.manual_seed(SEED)
    start = _FrozenBodyWithNorm()
    model = fitted.model_
    for name in ("body.weight", "unused.weight"):  # no gradient: the optimizer left them
        assert torch.equal(model.get_parameter(name), start.get_parameter(name)), name
    assert not torch.equal(model.head.weight, start.head.weight)
    # The ranks' statistics (the mean of their floating buffers; the batch count rank 0's:
    # 2 epochs of its steps), not the initial ones.
    steps = (N // 2) // B
    assert int(model.norm.num_batches_tracked) == 2 * steps
    assert not torch.allclose(model.norm.running_mean, start.norm.running_mean)
    final = fitted.checkpoint_.load()["model"]
    assert torch.equal(final["norm.running_mean"], model.norm.running_mean)


@pytest.mark.parametrize("sync", ["allreduce", "ssp"])
def test_ranks_build_the_model_in_the_drivers_default_dtype(
    client: Client, data: tuple[np.ndarray, np.ndarray], sync: str
) -> None:
    X, y = data
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fitted = trainer(client, sync=sync).fit(X.astype(np.float64), y.astype(np.float64))
    finally:
        torch.set_default_dtype(before)
    assert {p.dtype for p in fitted.model_.parameters()} == {torch.float64}
    assert fitted.history_[-1]["loss"] < fitted.history_[0]["loss"]


def wide_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(D, 2048), torch.nn.Linear(2048, 2048))


@pytest.mark.parametrize("sync", ["allreduce", "ssp"])
def test_a_large_model_is_sent_once_per_worker_not_in_the_task_graph(
    client: Client, data: tuple[np.ndarray, np.ndarray], sync: str
) -> None:
    # 16 MB of weights: inside each rank's task Dask warned "Sending large graph" per rank.
    X, y = data[0][:40], data[1][:40]  # two steps a rank
    targets = np.repeat(y.reshape(-1, 1), 2048, axis=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = trainer(client, sync=sync, model_fn=wide_model, epochs=1).fit(X, targets)
    assert not [w for w in caught if "large graph" in str(w.message)]
    assert fitted.model_[1].weight.shape == (2048, 2048)


def test_dask_arrays_give_the_numpy_result(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    Xd, yd = da.from_array(X, chunks=37), da.from_array(y, chunks=50)
    fitted = trainer(client).fit(Xd, yd)
    assert_weights(fitted.model_, local_sgd(X, y, epochs=2, every=None))
    with pytest.raises(InvalidParameterError, match="compute_chunk_sizes"):
        trainer(client).fit(Xd[Xd[:, 0] > 0], yd[Xd[:, 0] > 0])


def test_dask_dataframes_give_the_numpy_result(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    dd = pytest.importorskip("dask.dataframe")  # needs pandas and pyarrow
    X, y = data
    frame = dd.from_array(X, chunksize=41)
    fitted = trainer(client).fit(frame, dd.from_array(y, chunksize=60))
    assert_weights(fitted.model_, local_sgd(X, y, epochs=2, every=None))
    words = frame.assign(label=frame[0].map(lambda v: "a" if v > 0 else "b", meta=(0, object)))
    with pytest.raises(InvalidParameterError, match="numeric"):
        trainer(client).fit(words, y)


def test_ranks_run_where_their_persisted_rows_are(
    client: Client, data: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y = data
    first, second = sorted(alive_workers(client))
    half = N // 2  # rank 0's rows on the second worker, rank 1's on the first
    parts = [client.scatter(X[:half], workers=[second]), client.scatter(X[half:], workers=[first])]
    Xd = client.persist(
        da.concatenate(
            [
                da.from_delayed(f, shape=(len(rows), D), dtype=X.dtype)
                for f, rows in zip(parts, (X[:half], X[half:]), strict=True)
            ]
        )
    )
    client.gather(futures_of(Xd))  # computed where their parts are
    assert {w for ws in client.who_has(Xd).values() for w in ws} == {first, second}
    fitted = trainer(client).fit(Xd, y)
    assert fitted.rank_workers_ == [second, first]
    assert_weights(fitted.model_, local_sgd(X, y, epochs=2, every=None))
    monkeypatch.setattr(training_data, "_EXACT_UP_TO", 1)  # the greedy way, for many ranks
    assert training_data.rank_order(client, [first, second], Xd) == [second, first]
    # Nothing persisted: the cluster's order is kept.
    assert trainer(client).fit(da.from_array(X, chunks=37), y).rank_workers_ == [first, second]


def test_shuffle_is_reproducible_with_random_state(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    a = trainer(client, shuffle=True).fit(*data)
    b = trainer(client, shuffle=True).fit(*data)
    assert_weights(a.model_, [p.detach() for p in b.model_.parameters()])
    assert a.history_[0]["loss"] != trainer(client).fit(*data).history_[0]["loss"]


def _failed_rendezvous() -> int:
    """A rank whose job's other ranks never come: its init fails (as when a peer is lost)."""
    from datetime import timedelta

    import torch.distributed as dist

    from dmlsearch.training._rank import free_port

    with pytest.raises(Exception, match="timed out"):
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{free_port()}",  # nobody listens there
            rank=1,
            world_size=2,
            timeout=timedelta(seconds=1),
        )
    count: int = dist.distributed_c10d._world.group_count
    return count


def test_a_failed_rendezvous_on_a_worker_does_not_spoil_its_next_job(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    first = sorted(client.scheduler_info()["workers"])[0]
    # torch counted the failed group: a fresh peer would rendezvous under another name.
    assert client.submit(_failed_rendezvous, workers=[first], pure=False).result() == 1
    fitted = trainer(client, timeout=20.0).fit(*data)
    assert_weights(fitted.model_, local_sgd(*data, epochs=2, every=None))


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"n_workers": 3}, InvalidParameterError, "needs 3 workers at once but the cluster has 2"),
        ({"batch_size": 102}, InvalidParameterError, "n_workers x batch_size = 204"),
        ({"model_fn": not_a_module}, InvalidParameterError, "must return a torch.nn.Module"),
        ({"sync": "allreduc"}, InvalidParameterError, "did you mean 'allreduce'"),
        ({"experiment_name": " "}, InvalidParameterError, "non-empty experiment name"),
        (
            {"sync": "ssp", "staleness": -1},
            InvalidParameterError,
            "staleness: expected an int >= 0",
        ),
        ({"average_every": 0}, InvalidParameterError, "average_every: expected an int >= 1"),
        ({"epochs": 0}, InvalidParameterError, "epochs: expected an int >= 1"),
        ({"model_name": " "}, InvalidParameterError, "model_name: expected a non-empty"),
        ({"batch_size": 0}, InvalidParameterError, "batch_size: expected an int >= 1"),
        ({"optimizer_fn": lambda p: None}, InvalidParameterError, "torch.optim.Optimizer"),
        (
            {"loss_fn": torch.nn.functional.cross_entropy},
            InvalidParameterError,
            "loss_fn: loss_fn fails on",
        ),
        ({"device": "gpu"}, InvalidParameterError, "device: expected one of 'auto', 'cpu'"),
        ({"device": "cpu", "backend": "nccl"}, InvalidParameterError, "'nccl' runs on GPUs only"),
        pytest.param(
            {"device": "cuda"},
            InvalidParameterError,
            "device: 'cuda' needs a GPU on every rank's worker",
            marks=NEEDS_NO_GPU,
        ),
        pytest.param(
            {"device": "auto", "backend": "nccl"},
            InvalidParameterError,
            "backend: 'nccl' needs a GPU on every rank's worker",
            marks=NEEDS_NO_GPU,
        ),
    ],
)
def test_bad_input_fails_before_any_rank_starts(
    client: Client,
    data: tuple[np.ndarray, np.ndarray],
    params: dict[str, Any],
    error: type,
    match: str,
) -> None:
    before = len(client.run_on_scheduler(_training_tasks))
    with pytest.raises(error, match=match):
        trainer(client, **params).fit(*data)
    assert len(client.run_on_scheduler(_training_tasks)) == before


def _training_tasks(dask_scheduler: Any) -> list[str]:
    return [str(k) for k in dask_scheduler.task_prefixes if str(k).startswith("training")]


def test_clone_round_trips_and_shares_client_and_registry(client: Client, tmp_path: Any) -> None:
    with Registry(f"sqlite:///{tmp_path / 'reg.db'}") as registry:
        t = trainer(client, registry=registry, sync="average", average_every=4)
        c = clone(t)
        assert c.get_params() == t.get_params()
        assert c.client is client and c.registry is registry


def test_a_fitted_trainer_pickles_without_client_or_registry(
    client: Client, data: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    with Registry(f"sqlite:///{tmp_path / 'reg.db'}") as registry:
        fitted = trainer(client, epochs=1, registry=registry).fit(*data)
        copy = pickle.loads(pickle.dumps(fitted))
    assert copy.client is None and copy.registry is None
    assert copy.history_ == fitted.history_
    assert_weights(copy.model_, [p.detach() for p in fitted.model_.parameters()])


def test_checkpoints_kept_on_driver_or_in_the_registry(
    client: Client, data: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    t = trainer(client, epochs=3, checkpoint_every=2).fit(*data)
    assert t.checkpoint_ is not None and t.checkpoint_.epoch == 2 and t.checkpoint_.uri is None
    assert t.checkpoint_.load()["epoch"] == 2
    with Registry(f"sqlite:///{tmp_path / 'reg.db'}") as registry:
        r = trainer(client, epochs=2, registry=registry).fit(*data)
        ckpt = r.checkpoint_
        assert ckpt is not None and ckpt.epoch == 2 and ckpt.data is None and ckpt.uri
        assert registry.artifacts.exists(ckpt.sha256)
        state = ckpt.load(registry)
        for name, value in r.model_.state_dict().items():
            assert torch.equal(state["model"][name], value)
    assert trainer(client, checkpoint_every=None).fit(*data).checkpoint_ is None


@pytest.fixture(params=["sqlite", "postgresql"])
def registry(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Registry]:
    artifacts = str(tmp_path / "artifacts")
    if request.param == "sqlite":
        with Registry(f"sqlite:///{tmp_path / 'reg.db'}", artifacts) as reg:
            yield reg
    else:
        url = os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)
        with postgres_schema(url) as schema_url, Registry(schema_url, artifacts) as reg:
            yield reg


def test_the_trained_model_is_registered_with_its_lineage_and_curves(
    client: Client, data: tuple[np.ndarray, np.ndarray], registry: Registry
) -> None:
    X, y = data
    fitted = trainer(client, epochs=3, registry=registry, model_name="mlp").fit(X, y)
    record = fitted.model_version_
    assert record is not None and (record.model, record.version) == ("mlp", 1)
    stored = registry.model_version("mlp")
    lineage = stored.lineage
    assert lineage["data_fingerprint"] == data_fingerprint(X, y)
    assert (lineage["sync"], lineage["world_size"], lineage["epochs"]) == ("allreduce", 2, 3)
    assert lineage["batch_size"] == B and lineage["random_state"] == SEED
    assert (lineage["device"], lineage["backend"]) == (fitted.device_, fitted.backend_)
    assert lineage["rank_devices"] == fitted.rank_devices_
    assert lineage["checkpoint"]["sha256"] == fitted.checkpoint_.sha256
    # The per-epoch curves, as the trainer measured them.
    assert [e["epoch"] for e in lineage["history"]] == [1, 2, 3]
    assert [e["loss"] for e in lineage["history"]] == [e["loss"] for e in fitted.history_]
    assert stored.metrics["loss"] == fitted.history_[-1]["loss"]
    assert stored.signature == {"n_features": D, "dtype": "float32"}
    # Loaded into a fresh module, it is the trained model.
    loaded = registry.load_model("mlp", module=model_fn())
    assert_weights(loaded, [p.detach() for p in fitted.model_.parameters()])
    with torch.no_grad():
        assert torch.equal(loaded(torch.from_numpy(X)), fitted.model_(torch.from_numpy(X)))
    # Registering again (another name, or the same one) adds a version.
    again = fitted.register()
    assert (again.model, again.version) == ("mlp", 2)
    other = fitted.register("mlp-average", registry)
    assert other.lineage["history"] == lineage["history"]


def test_a_named_job_is_recorded_as_an_experiment_of_kind_train(
    client: Client, data: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    X, y = data
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as registry:
        # Refused before any rank ran (more workers than the cluster has): no record left.
        with pytest.raises(InvalidParameterError, match="n_workers"):
            trainer(client, n_workers=3, registry=registry, experiment_name="job").fit(X, y)
        assert registry.experiments().empty
        fitted = trainer(client, epochs=2, registry=registry, experiment_name="job").fit(X, y)
        exp = registry.experiment("job")
        assert fitted.experiment_id_ == exp.id and exp.status == "complete"
        assert exp.config["kind"] == "train" and exp.config["epochs"] == 2
        assert exp.config["sync"] == "allreduce" and exp.config["module"] == "Sequential"
        assert exp.data_fingerprint == data_fingerprint(X, y)
        assert exp.package_versions["torch"] == importlib.metadata.version("torch")
        assert exp.cluster["workers"] == 2
        version = fitted.model_version_
        assert version is not None and version.lineage["experiment"] == "job"
        assert version.lineage["experiment_id"] == exp.id
        # Registered into another registry, the version names no experiment.
        with Registry(f"sqlite:///{tmp_path / 'other.db'}") as other:
            assert "experiment" not in fitted.register("elsewhere", other).lineage
        # The name is taken: refused before training.
        with pytest.raises(InvalidParameterError, match="already exists"):
            trainer(client, registry=registry, experiment_name="job").fit(X, y)
        # A job that fails is recorded as failed.
        with pytest.raises(TrainingError):
            trainer(
                client, loss_fn=fails_on_workers, registry=registry, experiment_name="broken"
            ).fit(X, y)
        assert registry.experiment("broken").status == "failed"


def test_register_needs_a_fitted_trainer_and_a_registry(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    with pytest.raises(NotFittedError):
        trainer(client).register("x")
    fitted = trainer(client, epochs=1).fit(*data)
    assert fitted.model_version_ is None  # no registry: nothing registered
    with pytest.raises(InvalidParameterError, match="registry"):
        fitted.register("x")


class Killer(threading.Thread):
    """Kills one worker of ``client`` (SIGKILL) once ``trainer`` has its first checkpoint:
    the one of rank ``rank`` (a gang takes the workers in sorted order)."""

    def __init__(self, client: Client, trainer: DataParallelTrainer, rank: int = 1) -> None:
        super().__init__()
        self.trainer = trainer
        self.victim = sorted(alive_workers(client, running=False))[rank]
        self.pid = client.run(_pid, workers=[self.victim])[self.victim]
        self.killed = float("nan")

    def run(self) -> None:
        ends = time.monotonic() + 60
        while getattr(self.trainer, "checkpoint_", None) is None and time.monotonic() < ends:
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        self.killed = time.monotonic()


@pytest.mark.parametrize(
    ("sync", "rank"),
    [("allreduce", 1), ("ssp", 1), ("ssp", 0)],
    ids=["allreduce", "ssp-rank-1", "ssp-server-host"],
)
def test_a_killed_rank_worker_ends_fit_fast_naming_it(
    data: tuple[np.ndarray, np.ndarray], sync: str, rank: int
) -> None:
    # With "ssp", rank 0's worker also hosts the parameter server (an actor). A staleness
    # bound makes the first checkpoint (rank 0's first epoch) mean that rank 1 trains too.
    extra = {"staleness": 2} if sync == "ssp" else {}
    cluster = local_cluster(2)
    try:
        with Client(cluster, set_as_default=False) as client:
            t = trainer(client, epochs=100_000, sync=sync, **extra)
            killer = Killer(client, t, rank)
            killer.start()
            with pytest.raises(
                TrainingError, match=f"worker {killer.victim} .*left the cluster"
            ) as info:
                t.fit(*data)
            raised = time.monotonic()
            killer.join()
            assert info.value.worker == killer.victim
            assert info.value.rank == rank
            assert info.value.checkpoint is not None  # training had reached an epoch's end
            assert raised - killer.killed < 60
            assert client.get_metadata(METADATA_KEY, default={}) == {}
    finally:
        cluster.close()


def test_elastic_fit_resumes_from_the_last_checkpoint(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Any
) -> None:
    cluster = local_cluster(2)
    epochs = 150
    try:
        with (
            Client(cluster, set_as_default=False) as client,
            Registry(f"sqlite:///{tmp_path / 'reg.db'}") as registry,
        ):
            # With a registry, the resume reads the checkpoint back from its artifact store.
            t = trainer(client, epochs=epochs, elastic=True, registry=registry)
            killer = Killer(client, t)
            killer.start()
            t.fit(*data)
            killer.join()
            assert len(t.resumed_) == 1
            assert t.resumed_[0]["worker"] == killer.victim
            assert 1 <= t.resumed_[0]["epoch"] < epochs
            assert [h["epoch"] for h in t.history_] == list(range(1, epochs + 1))
            assert t.checkpoint_ is not None and t.checkpoint_.epoch == epochs
            assert t.checkpoint_.uri is not None
            assert t.n_workers_ in (1, 2)
    finally:
        cluster.close()


def _busy(dask_worker: Any) -> int:
    return len(dask_worker.state.executing)


@pytest.mark.parametrize("sync", ["allreduce", "ssp"])
def test_an_interrupted_fit_stops_its_ranks_and_frees_the_workers(
    data: tuple[np.ndarray, np.ndarray], sync: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A probe: Dask cannot stop a running task, so the ranks of a fit interrupted by
    # Ctrl-C trained on to their last epoch (the next fit failed after start_timeout);
    # with "ssp" they waited for ever on the dropped parameter server.
    from dmlsearch.training import _watch

    started = time.monotonic()

    def poll(self: Any) -> None:
        if time.monotonic() - started > 2.0:
            raise KeyboardInterrupt  # what Ctrl-C raises in the driver's loop

    cluster = local_cluster(2)
    try:
        with Client(cluster, set_as_default=False) as client:
            with monkeypatch.context() as patch:
                patch.setattr(_watch.JobWatch, "poll", poll)
                with pytest.raises(KeyboardInterrupt):
                    trainer(client, epochs=100_000, sync=sync, timeout=20).fit(*data)
            interrupted = time.monotonic()
            while any(client.run(_busy).values()) and time.monotonic() - interrupted < 90:
                time.sleep(0.1)
            assert not any(client.run(_busy).values())
            # The ranks look once a second; a rank blocked where it cannot look (1 suite run
            # in 7 on 2026-12-08, cause not found: perhaps the rendezvous with a peer that
            # never joined) gives up after the job's timeout.
            assert time.monotonic() - interrupted < 20 + 30
            fitted = trainer(client, sync=sync).fit(*data)  # the workers are free again
            assert len(fitted.history_) == 2
    finally:
        cluster.close()
