"""``DataParallelTrainer``: PyTorch data-parallel training on a gang of Dask workers.

``fit`` checks everything it can on the driver, reserves ``n_workers`` workers at once
(:mod:`dmlsearch.runner.gang`), scatters each rank's shard of rows once to its worker
(contiguous rows; with ``shuffle``, of the rows permuted once by the seed), and runs one
rank per worker: ``torch.distributed`` over gloo (NCCL when every rank has a GPU of its
own; :mod:`._device`), rendezvous on a port chosen at run time on rank 0's host. Rank 0
hands a checkpoint to the driver every ``checkpoint_every`` epochs; the driver keeps the
last (or stores each in the registry's artifact store). A rank that raises or whose worker
leaves ends ``fit`` within seconds with :class:`~dmlsearch.exceptions.TrainingError`
naming the worker. With a ``registry``, the trained model is registered at the end with
its lineage (data fingerprint, sync mode, world size, epochs) and its per-epoch curves;
with ``experiment_name`` too, the job is recorded as an experiment of kind ``train`` that
the version links to. While it runs, the Dask dashboard's ``/dmlsearch`` page shows the
job (ranks, epoch, loss, rows/s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
import warnings
from typing import Any

import torch
from distributed import Client
from distributed.comm import get_address_host
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from .._dask_config import config_flag
from .._recording import data_fingerprint, input_signature
from ..ensemble._common import entropy_of
from ..exceptions import (
    GangError,
    GangWorkerLostError,
    InvalidParameterError,
    TrainingError,
)
from ..registry import FormatError, ModelVersionRecord, RegistryError
from ..runner.cluster import cluster_shape, resolve_client, scheduler_loss
from ..runner.gang import Gang, alive_workers, reserve
from ._checkpoint import Checkpoint, CheckpointInbox, Start, state_bytes, state_from_bytes
from ._checks import (
    SYNCS,
    check_name,
    check_own_processes,
    check_params,
    diverged,
    initial_model,
)
from ._data import (
    check_data,
    check_finite_shards,
    computed_on,
    place_shards,
    rank_order,
    shard_order,
)
from ._device import DevicePlan, plan_devices, probe_workers
from ._rank import JobSpec, free_port, train_rank
from ._record import JobRecord, job_lineage, job_metrics
from ._resume import open_job
from ._shm import CONFIG_KEY as SHARED_MEMORY_KEY
from ._ssp import run_ssp
from ._stop import forget_arrivals, new_stop_event, stop_ranks
from ._watch import JobWatch

__all__ = ["SYNCS", "DataParallelTrainer"]

logger = logging.getLogger("dmlsearch")

#: How many times an ``elastic`` fit resumes after losing a worker before it gives up.
MAX_RESUMES = 3


def _seed_of(random_state: Any) -> int:
    """The job's seed: of the initial weights, the rows' shuffle and the ranks' draws."""
    return entropy_of(random_state) % (2**31 - 1)


class DataParallelTrainer(BaseEstimator):
    """Train a PyTorch model data-parallel on ``n_workers`` Dask workers.

    ``model_fn()`` builds the ``torch.nn.Module``, ``optimizer_fn(params)`` its optimizer,
    ``loss_fn(output, target)`` the mean loss of a batch. ``batch_size`` is per rank; an
    epoch is ``(n // n_workers) // batch_size`` steps on every rank (the rest of a shard's
    rows sits that epoch out). ``sync``: ``"allreduce"`` (gradients averaged every step,
    one flat-buffer all-reduce) or ``"average"`` (local SGD, parameters averaged every
    ``average_every`` steps and at each epoch's end) or ``"ssp"`` (a parameter server
    on a Dask actor; no rank more than ``staleness`` steps ahead of the slowest, ``None``:
    fully asynchronous).
    ``shuffle``: rows from the driver are permuted once by the seed before they are dealt
    out (each rank holds a random sample; Dask input stays where it is, in its order), and
    each rank permutes its shard every epoch; ``False``: rank r holds the contiguous rows
    ``[r*n//w, (r+1)*n//w)`` in order.
    ``timeout``: seconds a collective (and the ranks' rendezvous) may wait.

    ``device``: ``"cpu"``, ``"cuda"`` (every rank's worker must see a GPU) or ``"auto"``
    (CUDA when every rank's worker sees a GPU, else CPU). ``backend``: ``"auto"`` (NCCL
    when every rank has a GPU of its own, else gloo), ``"gloo"`` or ``"nccl"``. Both are
    decided for all ranks before any starts; see docs/training.md.

    Fitted: ``model_`` (the trained module, on the driver, on CPU: a copy of what
    ``model_fn()`` returned, which is left as it was), ``history_`` (per
    epoch: ``loss``, ``seconds``, ``samples_per_s``, ``sync_s``, ``sync_rounds``),
    ``n_workers_``, ``device_`` (``"cpu"`` or ``"cuda"``), ``backend_``, ``rank_devices_``
    (each rank's, e.g. ``"cuda:0"``), ``checkpoint_`` (the last :class:`Checkpoint`, or
    None), ``resumed_`` (one dict per resume: of a ``resume=True`` fit, ``epoch`` and
    ``checkpoint`` (its sha256, None when there was none) and ``n_workers``; of an
    ``elastic`` fit, ``epoch``, lost ``worker``, ``n_workers`` after).

    ``elastic=True``: when a rank's worker is lost, training resumes from the last
    checkpoint (or from the start) on the workers the cluster has then (at most
    ``n_workers``, up to 3 times); a rank that raises is never resumed.

    ``registry``: checkpoints go to its artifact store, and ``fit`` ends by registering
    ``model_`` as the next version of ``model_name`` (default ``<module class>-<random
    suffix>``), as :meth:`register` does; ``model_version_`` is its record (``None``
    without a registry, or when registering failed: a warning says why). A fit whose
    last epoch's loss is NaN or infinite warns (``RuntimeWarning``) and is not registered.

    ``experiment_name``: with a registry, the job is recorded as a new experiment of that
    name (kind ``train``: its settings, data fingerprint, cluster and final status; a name
    already taken is refused before training) and the registered version links to it
    (``experiment_id_``). It also names the job on the dashboard's ``/dmlsearch`` page.
    Each checkpoint is recorded in that experiment while the job is unfinished.

    ``resume=True`` (with ``registry`` and ``experiment_name``): continue that unfinished
    job (interrupted, failed, or whose driver was lost) from the last checkpoint it
    recorded (or from the start when it recorded none), training only the remaining
    epochs; ``history_`` holds every epoch once. Refused when the data or the settings
    that decide what is trained differ from the job's (the model, loss, optimizer, sync,
    batch size, shuffle, seed) or ``epochs`` is lowered; a finished job raises
    :class:`~dmlsearch.exceptions.JobCompleteError`. See docs/training.md.
    """

    def __init__(
        self,
        model_fn: Any,
        loss_fn: Any,
        optimizer_fn: Any,
        *,
        epochs: int = 1,
        batch_size: int = 32,
        sync: str = "allreduce",
        n_workers: int = 2,
        average_every: int = 1,
        staleness: int | None = None,
        shuffle: bool = True,
        random_state: Any = None,
        client: Any = None,
        checkpoint_every: int | None = 1,
        registry: Any = None,
        timeout: float = 60.0,
        elastic: bool = False,
        model_name: str | None = None,
        experiment_name: str | None = None,
        device: str = "auto",
        backend: str = "auto",
        resume: bool = False,
    ) -> None:
        self.model_fn = model_fn
        self.loss_fn = loss_fn
        self.optimizer_fn = optimizer_fn
        self.epochs = epochs
        self.batch_size = batch_size
        self.sync = sync
        self.n_workers = n_workers
        self.average_every = average_every
        self.staleness = staleness
        self.shuffle = shuffle
        self.random_state = random_state
        self.client = client
        self.checkpoint_every = checkpoint_every
        self.registry = registry
        self.timeout = timeout
        self.elastic = elastic
        self.model_name = model_name
        self.experiment_name = experiment_name
        self.device = device
        self.backend = backend
        self.resume = resume

    def __sklearn_clone__(self) -> DataParallelTrainer:
        # The client and the registry are handles to shared services: shared, not copied.
        return type(self)(**self.get_params(deep=False))

    def __getstate__(self) -> dict[str, Any]:
        # A pickled trainer keeps a scheduler address but never a live Client or database
        # connection; unpickled, it trains on the default client and without a registry.
        state = dict(super().__getstate__())
        if not isinstance(state.get("client"), (str, type(None))):
            state["client"] = None
        state["registry"] = None
        state.pop("_record", None)
        return state

    def _prepare(
        self,
        X: Any,
        y: Any,
        w: int,
        initial: torch.nn.Module | None = None,
        client: Client | None = None,
    ) -> tuple[Any, Any, int, torch.nn.Module]:
        """Everything checked on the driver for ``w`` ranks: the data, the seed, the model.

        ``client``: where Dask ``X`` and ``y`` are (their row counts and first batch are
        computed there); None: the default client's cluster.
        """
        check_params(self)
        with computed_on(client):
            Xa, ya = check_data(X, y, w * int(self.batch_size))
            self.data_fingerprint_ = data_fingerprint(Xa, ya)
            self.signature_ = input_signature(Xa)
            seed = _seed_of(self.random_state)
            model, self._dtypes = initial_model(self, seed, Xa, ya, initial)
        self.checkpoint_: Checkpoint | None = None
        self.resumed_: list[dict[str, Any]] = []
        return Xa, ya, seed, model

    def fit(self, X: Any, y: Any) -> DataParallelTrainer:
        """Train on ``(X, y)``: NumPy arrays, pandas or Dask dataframes, Dask arrays; returns self."""
        given = self.client if isinstance(self.client, Client) else None
        Xa, ya, seed, model = self._prepare(X, y, int(self.n_workers), client=given)
        self.experiment_id_: int | None = None
        record: JobRecord | None = None
        start = Start(state_bytes(0, model))
        with resolve_client(self.client) as client:
            if self.registry is not None and self.experiment_name is not None:
                record, start = open_job(self, cluster_shape(client), model, start)
                self.experiment_id_ = record.id
            self._record = record  # each checkpoint is recorded in it (_keep)
            try:
                with scheduler_loss(client):
                    results, start, k = self._watched(client, Xa, ya, model, start, seed, record)
            finally:
                self._record = None
        self._fitted(model, results, start, k)
        divergence = diverged((e["epoch"], e["loss"]) for e in self.history_)
        if divergence is not None:
            # A NaN model is kept to look at, but never becomes a registered version.
            kept = " and was not registered" if self.registry is not None else ""
            warnings.warn(
                f"{divergence}. model_ is kept for inspection{kept}",
                RuntimeWarning,
                stacklevel=2,
            )
        elif self.registry is not None:
            try:
                self.register()
            except (FormatError, RegistryError) as exc:
                # A finished training is never lost to the registry: model_ is here.
                warnings.warn(f"model_ was not registered: {exc}", UserWarning, stacklevel=2)
        if record is not None:
            record.close("complete")
        return self

    def fit_on_gang(
        self,
        gang: Gang,
        X: Any,
        y: Any,
        *,
        initial: torch.nn.Module | None = None,
        start_epoch: int = 0,
        optimizer_state: dict[str, Any] | None = None,
        shards: list[list[Any]] | None = None,
    ) -> DataParallelTrainer:
        """Train on the workers of ``gang``, which the caller has reserved; returns self.

        For a caller that holds a gang already (a ``SearchCV(workers_per_trial=k)`` trial):
        one rank on each of ``gang.workers``, nothing reserved again; ``n_workers``,
        ``client``, ``elastic``, ``registry`` and ``experiment_name`` are not used, and no
        job is shown on the dashboard (the search shows its trials). ``initial``: the
        module to start from (trained in place, becomes ``model_``) instead of a seeded
        ``model_fn()``; with ``start_epoch`` > 0 (and the optimizer's ``optimizer_state``)
        the job continues one that ran that many epochs: it trains epochs ``start_epoch``
        to ``epochs`` with the same per-epoch shuffling and seeds, so the model is the one
        ``epochs`` at once would give. ``shards``: the rows already on the gang's workers
        (:meth:`place` of these ``X`` and ``y``), for a caller that runs several jobs on the
        same rows. A rank that fails or whose worker leaves raises :class:`TrainingError`.
        """
        if not 0 <= int(start_epoch) < int(self.epochs):
            raise InvalidParameterError(
                "start_epoch",
                f"start_epoch={start_epoch} must be at least 0 and below epochs={self.epochs} "
                "(the total, epochs already run included)",
            )
        Xa, ya, seed, model = self._prepare(X, y, gang.size, initial, gang.client)
        start = Start(state_bytes(int(start_epoch), model, optimizer_state), int(start_epoch))
        silent = JobWatch(gang.client, None)
        results = self._run(gang.client, gang, Xa, ya, start, seed, silent, shards)
        self._fitted(model, results, start, gang.size)
        return self

    def place(self, gang: Gang, X: Any, y: Any) -> list[list[Any]]:
        """Rank r's rows of NumPy ``X`` and ``y`` on ``gang.workers[r]``, dealt out as
        :meth:`fit_on_gang` deals them (with ``shuffle``, permuted by the seed of an int
        ``random_state``): its ``shards`` for a caller that runs several jobs on these rows."""
        order = shard_order(X, y, _seed_of(self.random_state), bool(self.shuffle))
        return place_shards(gang.client, gang.workers, X, y, order)

    def _fitted(
        self, model: torch.nn.Module, results: list[dict[str, Any]], start: Start, k: int
    ) -> None:
        """Set the fitted attributes from rank 0's final state and figures."""
        final = state_from_bytes(results[0]["state"])
        model.load_state_dict(final["model"])
        self.model_ = model
        self.optimizer_state_: dict[str, Any] | None = final.get("optimizer")
        self.history_: list[dict[str, Any]] = [*start.history, *results[0]["history"]]
        self.n_workers_ = k
        self.transport_: str = results[0].get("transport", self.backend_)
        self.model_version_: ModelVersionRecord | None = None

    def _watched(
        self,
        client: Client,
        X: Any,
        y: Any,
        model: torch.nn.Module,
        start: Start,
        seed: int,
        record: Any,
    ) -> tuple[list[dict[str, Any]], Start, int]:
        """:meth:`_train`, shown on the dashboard's page; a failure closes the record."""
        name = self.experiment_name or f"DataParallelTrainer.fit {uuid.uuid4().hex[:6]}"
        meta = {
            "kind": "train",
            "estimator": type(model).__name__,
            "strategy": f"data-parallel ({self.sync})",
            "sync": self.sync,
            "total": int(self.epochs),
            "n_workers": int(self.n_workers),
            "batch_size": int(self.batch_size),
        }
        watch = JobWatch.start(client, name, meta)
        status = "failed"
        try:
            results, start, k = self._train(client, X, y, start, seed, watch)
            watch.epochs([*start.history, *results[0]["history"]])
            status = "complete"
            return results, start, k
        except InvalidParameterError:
            if record is not None and record.previous is not None:
                # A resume refused before any rank ran: the job is left as it was.
                record.refused()
                record = None
            elif record is not None and self.checkpoint_ is None and not self.resumed_:
                # Refused before any rank ran (more workers than the cluster has): the
                # name stays free for the corrected job.
                record.discard()
                record = None
            raise
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            watch.finish(status)
            if record is not None and status != "complete":
                record.close(status)

    def register(self, name: str | None = None, registry: Any = None) -> ModelVersionRecord:
        """Register ``model_`` (its ``state_dict``) as the next version of ``name``.

        ``name`` defaults to ``model_name``, else ``<module class>-<random suffix>``;
        ``registry`` to the trainer's. The version's lineage holds the data fingerprint,
        ``sync`` (with ``average_every``/``staleness``), ``world_size``, ``epochs``,
        ``batch_size`` (per rank), the resumes of an elastic fit, the last checkpoint's
        sha256 and ``history`` (the per-epoch curves); its metrics the final ``loss`` and
        mean ``samples_per_s``. Load it back with
        ``registry.load_model(name, module=model_fn())``. Sets and returns
        ``model_version_``; registry errors are raised.
        """
        if not hasattr(self, "model_"):
            raise NotFittedError("register needs a fitted trainer: call fit first")
        registry = self.registry if registry is None else registry
        if registry is None or not hasattr(registry, "register_model"):
            raise InvalidParameterError(
                "registry", f"expected a dmlsearch Registry to register into, got {registry!r}"
            )
        check_name("name", name)
        name = name or self.model_name or f"{type(self.model_).__name__}-{uuid.uuid4().hex[:8]}"
        # The job's experiment is in the trainer's own registry only.
        experiment = self.experiment_id_ if registry is self.registry else None
        self.model_version_ = registry.register_model(
            name,
            self.model_,
            metrics=job_metrics(self.history_),
            experiment=experiment,
            data_fingerprint=self.data_fingerprint_,
            signature=self.signature_,
            lineage=job_lineage(self),
        )
        return self.model_version_

    def _keep(self, checkpoint: Checkpoint) -> None:
        self.checkpoint_ = checkpoint
        record = getattr(self, "_record", None)
        if record is not None:
            record.checkpoint(checkpoint)

    def _train(
        self, client: Client, X: Any, y: Any, start: Start, seed: int, watch: JobWatch
    ) -> tuple[list[dict[str, Any]], Start, int]:
        """Run the job on a gang; with ``elastic``, again from the last checkpoint on a loss."""
        k = int(self.n_workers)
        while True:
            try:
                with reserve(client, k, name="training") as gang:
                    return self._run(client, gang, X, y, start, seed, watch), start, k
            except TrainingError as exc:
                lost = isinstance(exc.__cause__, GangWorkerLostError)
                if not (self.elastic and lost) or len(self.resumed_) >= MAX_RESUMES:
                    raise
                k = min(int(self.n_workers), len(alive_workers(client)))
                if k < 1:
                    raise
                last = self.checkpoint_
                if last is not None:
                    start = Start(last.bytes(self.registry), last.epoch, last.history)
                self.resumed_.append({"epoch": start.epoch, "worker": exc.worker, "n_workers": k})
                logger.warning(
                    "dmlsearch: worker %s lost; training resumes from epoch %d on %d workers",
                    exc.worker,
                    start.epoch,
                    k,
                )

    def _run(
        self,
        client: Client,
        gang: Gang,
        X: Any,
        y: Any,
        start: Start,
        seed: int,
        watch: JobWatch,
        placed: list[list[Any]] | None = None,
    ) -> list[dict[str, Any]]:
        n, w, b = int(X.shape[0]), gang.size, int(self.batch_size)
        if placed is None:
            # The same workers, each rank where its persisted rows already are.
            gang = dataclasses.replace(gang, workers=rank_order(client, gang.workers, X))
        self.rank_workers_ = list(gang.workers)
        if self.sync != "ssp":
            check_own_processes(client, gang.workers)
        workers = alive_workers(client, running=False)
        plan = self._plan(client, gang)
        shards = placed
        if shards is None:
            # With shuffle, rows from the driver are dealt out in the seed's random order
            # (the same for every resume of the job): each rank holds a random sample.
            order = shard_order(X, y, seed, bool(self.shuffle))
            shards = place_shards(client, gang.workers, X, y, order)
        check_finite_shards(client, X, y, shards)
        first = gang.workers[0]
        port = client.run(free_port, workers=[first])[first]
        checkpoints = CheckpointInbox(client, self.registry, self._keep, list(start.history))
        progress_var = watch.new_run(list(gang.workers), start.epoch)

        def tick() -> None:
            checkpoints.poll()
            watch.poll()

        job = JobSpec(
            model_fn=self.model_fn,
            loss_fn=self.loss_fn,
            optimizer_fn=self.optimizer_fn,
            initial=start.state,
            start_epoch=start.epoch,
            epochs=int(self.epochs),
            batch_size=b,
            steps=(n // w) // b,
            sync=self.sync,
            average_every=int(self.average_every),
            shuffle=bool(self.shuffle),
            seed=seed,
            host=get_address_host(first),
            port=int(port),
            world_size=w,
            timeout=float(self.timeout),
            checkpoint_every=self.checkpoint_every,
            checkpoint_var=checkpoints.name if self.checkpoint_every else None,
            backend=plan.backend,
            rank_devices=plan.rank_devices,
            progress_var=progress_var,
            dtypes=self._dtypes,
            default_dtype=str(torch.get_default_dtype()).removeprefix("torch."),
            shared_memory=config_flag(SHARED_MEMORY_KEY),
            stop_event=new_stop_event(),
        )
        # Sent once to each rank's worker rather than inside each rank's task: the job holds
        # the model's state, and a large model in the task graph made Dask warn ("Sending
        # large graph") once per rank.
        [sent] = client.scatter([job], workers=list(gang.workers), broadcast=True, hash=False)
        args = [
            (sent, r, int(workers.get(wk, {}).get("nthreads", 1)), *shards[r])
            for r, wk in enumerate(gang.workers)
        ]
        try:
            try:
                if self.sync == "ssp":
                    return run_ssp(client, gang, job, args, checkpoints, self.staleness, tick)
                results: list[dict[str, Any]] = gang.run(train_rank, args, on_tick=tick)
            except BaseException:
                # Ranks still running (Dask cannot stop a task) would train on to their
                # last epoch and hold the gang's workers: tell them to stop.
                stop_ranks(client, job.stop_event)
                raise
            finally:
                forget_arrivals(client, job.stop_event, job.world_size)
            checkpoints.poll()
            return results
        except GangError as exc:
            with contextlib.suppress(Exception):  # the one published just before the loss
                checkpoints.poll()
            last = self.checkpoint_
            where = (
                f"the last checkpoint is of epoch {last.epoch} (trainer.checkpoint_)"
                if last
                else "no checkpoint was taken"
            )
            if last and self.registry is not None and self.experiment_name is not None:
                where += "; resume=True (`dmlsearch resume FILE`) continues from it"
            raise TrainingError(
                f"training failed: {exc}; {where}",
                worker=exc.worker,
                rank=exc.rank,
                checkpoint=last,
            ) from exc
        finally:
            checkpoints.delete()

    def _plan(self, client: Client, gang: Gang) -> DevicePlan:
        """Decide the ranks' devices and backend (probing the gang's workers unless on CPU)."""
        probes = [] if self.device == "cpu" else probe_workers(client, gang.workers)
        plan = plan_devices(self.device, self.backend, probes, gang.workers)
        self.device_, self.backend_ = plan.device, plan.backend
        self.rank_devices_ = list(plan.rank_devices)
        if plan.device == "cuda":
            logger.info(
                "dmlsearch: training on %s over %s (%s)",
                ", ".join(plan.rank_devices),
                plan.backend,
                ", ".join(sorted(set(plan.gpu_names))),
            )
        return plan
