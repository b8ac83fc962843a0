"""``DataParallelTrainer``: PyTorch data-parallel training on a gang of Dask workers.

``fit`` checks everything it can on the driver, reserves ``n_workers`` workers at once
(:mod:`dmlsearch.runner.gang`), scatters each rank's contiguous shard of rows once to its
worker, and runs one rank per worker: ``torch.distributed`` over gloo, rendezvous on a
port chosen at run time on rank 0's host. Rank 0 hands a checkpoint to the driver every
``checkpoint_every`` epochs; the driver keeps the last (or stores each in the registry's
artifact store). A rank that raises or whose worker leaves ends ``fit`` within seconds
with :class:`~dmlsearch.exceptions.TrainingError` naming the worker. With a ``registry``,
the trained model is registered at the end with its lineage (data fingerprint, sync mode,
world size, epochs) and its per-epoch curves.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import numbers
import uuid
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from distributed import Client
from distributed.comm import get_address_host
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from .._recording import data_fingerprint, input_signature
from ..ensemble._common import check_bool, entropy_of
from ..exceptions import (
    GangError,
    GangWorkerLostError,
    InvalidParameterError,
    TrainingError,
)
from ..registry import FormatError, ModelVersionRecord, RegistryError
from ..runner.cluster import resolve_client
from ..runner.gang import Gang, alive_workers, reserve
from ._checkpoint import Checkpoint, CheckpointInbox, state_bytes, state_from_bytes
from ._data import check_data, head, place_shards
from ._rank import JobSpec, free_port, train_rank
from ._ssp import ParameterServer, server_state, train_ssp_rank

__all__ = ["SYNCS", "DataParallelTrainer"]

logger = logging.getLogger("dmlsearch")

#: The synchronisation models ``sync`` accepts.
SYNCS = ("allreduce", "average", "ssp")
#: How many times an ``elastic`` fit resumes after losing a worker before it gives up.
MAX_RESUMES = 3


@dataclass(frozen=True)
class _Start:
    """Where a job starts: the state's bytes, the epochs already run and their figures."""

    state: bytes
    epoch: int = 0
    history: tuple[dict[str, Any], ...] = ()


def _check_int(name: str, value: Any, low: int, *, none: bool = False) -> None:
    if none and value is None:
        return
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        extra = " or None" if none else ""
        raise InvalidParameterError(name, f"expected an int >= {low}{extra}, got {value!r}")


def _check_name(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidParameterError(name, f"expected a non-empty model name or None, got {value!r}")


def _check_sync(sync: Any, staleness: Any) -> None:
    if sync not in SYNCS:
        close = difflib.get_close_matches(str(sync), SYNCS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidParameterError("sync", f"unknown {sync!r}{hint} (one of {', '.join(SYNCS)})")
    _check_int("staleness", staleness, 0, none=True)


class DataParallelTrainer(BaseEstimator):
    """Train a PyTorch model data-parallel on ``n_workers`` Dask workers.

    ``model_fn()`` builds the ``torch.nn.Module``, ``optimizer_fn(params)`` its optimizer,
    ``loss_fn(output, target)`` the mean loss of a batch. ``batch_size`` is per rank; an
    epoch is ``(n // n_workers) // batch_size`` steps on every rank (the rest of a shard's
    rows sits that epoch out). ``sync``: ``"allreduce"`` (gradients averaged every step,
    DistributedDataParallel) or ``"average"`` (local SGD, parameters averaged every
    ``average_every`` steps and at each epoch's end) or ``"ssp"`` (a parameter server
    on a Dask actor; no rank more than ``staleness`` steps ahead of the slowest, ``None``:
    fully asynchronous).
    ``timeout``: seconds a collective (and the ranks' rendezvous) may wait.

    Fitted: ``model_`` (the trained module, on the driver), ``history_`` (per epoch:
    ``loss``, ``seconds``, ``samples_per_s``, ``sync_s``, ``sync_rounds``), ``n_workers_``,
    ``checkpoint_`` (the last :class:`Checkpoint`, or None), ``resumed_`` (one dict per
    resume of an ``elastic`` fit: ``epoch``, lost ``worker``, ``n_workers`` after).

    ``elastic=True``: when a rank's worker is lost, training resumes from the last
    checkpoint (or from the start) on the workers the cluster has then (at most
    ``n_workers``, up to 3 times); a rank that raises is never resumed.

    ``registry``: checkpoints go to its artifact store, and ``fit`` ends by registering
    ``model_`` as the next version of ``model_name`` (default ``<module class>-<random
    suffix>``), as :meth:`register` does; ``model_version_`` is its record (``None``
    without a registry, or when registering failed: a warning says why).
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
        return state

    def _check_params(self) -> None:
        for name in ("model_fn", "loss_fn", "optimizer_fn"):
            if not callable(getattr(self, name)):
                raise InvalidParameterError(
                    name, f"expected a callable, got {getattr(self, name)!r}"
                )
        _check_int("epochs", self.epochs, 1)
        _check_int("batch_size", self.batch_size, 1)
        _check_int("n_workers", self.n_workers, 1)
        _check_int("average_every", self.average_every, 1)
        _check_int("checkpoint_every", self.checkpoint_every, 1, none=True)
        check_bool("shuffle", self.shuffle)
        check_bool("elastic", self.elastic)
        _check_sync(self.sync, self.staleness)
        if not isinstance(self.timeout, numbers.Real) or not self.timeout > 0:
            raise InvalidParameterError("timeout", f"expected seconds > 0, got {self.timeout!r}")
        if self.registry is not None and not hasattr(self.registry, "artifacts"):
            raise InvalidParameterError(
                "registry", f"expected a dmlsearch Registry or None, got {self.registry!r}"
            )
        _check_name("model_name", self.model_name)

    def _initial_model(
        self, seed: int, X: Any, y: Any, model: torch.nn.Module | None = None
    ) -> torch.nn.Module:
        """Build the model on the driver (seeded; or take ``model``) and try it on a batch,
        before any rank runs."""
        if model is None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = self.model_fn()
        if not isinstance(model, torch.nn.Module):
            raise InvalidParameterError(
                "model_fn", f"must return a torch.nn.Module, returned {type(model).__name__}"
            )
        optimizer = self.optimizer_fn(model.parameters())
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidParameterError(
                "optimizer_fn",
                f"must return a torch.optim.Optimizer, returned {type(optimizer).__name__}",
            )
        from ._rank import _tensor

        model.eval()
        try:
            with torch.no_grad():
                b = int(self.batch_size)
                self.loss_fn(model(_tensor(head(X, b))), _tensor(head(y, b)))
        except Exception as exc:
            raise InvalidParameterError(
                "model_fn",
                f"the model and loss_fn fail on a batch of X and y: {type(exc).__name__}: {exc}",
            ) from exc
        model.train()
        return model

    def _prepare(
        self, X: Any, y: Any, w: int, initial: torch.nn.Module | None = None
    ) -> tuple[Any, Any, int, torch.nn.Module]:
        """Everything checked on the driver for ``w`` ranks: the data, the seed, the model."""
        self._check_params()
        Xa, ya = check_data(X, y, w * int(self.batch_size))
        self.data_fingerprint_ = data_fingerprint(Xa, ya)
        self.signature_ = input_signature(Xa)
        seed = entropy_of(self.random_state) % (2**31 - 1)
        model = self._initial_model(seed, Xa, ya, initial)
        self.checkpoint_: Checkpoint | None = None
        self.resumed_: list[dict[str, Any]] = []
        return Xa, ya, seed, model

    def fit(self, X: Any, y: Any) -> DataParallelTrainer:
        """Train on ``(X, y)``: NumPy arrays, or Dask arrays with known chunks; returns self."""
        Xa, ya, seed, model = self._prepare(X, y, int(self.n_workers))
        with resolve_client(self.client) as client:
            results, start, k = self._train(client, Xa, ya, _Start(state_bytes(0, model)), seed)
        self._fitted(model, results, start, k)
        if self.registry is not None:
            try:
                self.register()
            except (FormatError, RegistryError) as exc:
                # A finished training is never lost to the registry: model_ is here.
                warnings.warn(f"model_ was not registered: {exc}", UserWarning, stacklevel=2)
        return self

    def fit_on_gang(
        self, gang: Gang, X: Any, y: Any, *, initial: torch.nn.Module | None = None
    ) -> DataParallelTrainer:
        """Train on the workers of ``gang``, which the caller has reserved; returns self.

        For a caller that holds a gang already (a ``SearchCV(workers_per_trial=k)`` trial):
        one rank on each of ``gang.workers``, nothing reserved again; ``n_workers``,
        ``client``, ``elastic`` and ``registry`` are not used. ``initial``: the module to
        start from (trained in place, becomes ``model_``) instead of a seeded ``model_fn()``.
        A rank that fails or whose worker leaves raises :class:`TrainingError`.
        """
        Xa, ya, seed, model = self._prepare(X, y, gang.size, initial)
        start = _Start(state_bytes(0, model))
        self._fitted(model, self._run(gang.client, gang, Xa, ya, start, seed), start, gang.size)
        return self

    def _fitted(
        self, model: torch.nn.Module, results: list[dict[str, Any]], start: _Start, k: int
    ) -> None:
        """Set the fitted attributes from rank 0's final state and figures."""
        model.load_state_dict(state_from_bytes(results[0]["state"])["model"])
        self.model_ = model
        self.history_: list[dict[str, Any]] = [*start.history, *results[0]["history"]]
        self.n_workers_ = k
        self.model_version_: ModelVersionRecord | None = None

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
        _check_name("name", name)
        name = name or self.model_name or f"{type(self.model_).__name__}-{uuid.uuid4().hex[:8]}"
        self.model_version_ = registry.register_model(
            name,
            self.model_,
            metrics=self._metrics(),
            data_fingerprint=self.data_fingerprint_,
            signature=self.signature_,
            lineage=self._lineage(),
        )
        return self.model_version_

    def _metrics(self) -> dict[str, float]:
        rates = [e["samples_per_s"] for e in self.history_]
        return {
            "loss": float(self.history_[-1]["loss"]),
            "samples_per_s": float(sum(rates) / len(rates)),
        }

    def _lineage(self) -> dict[str, Any]:
        sync: dict[str, Any] = {"sync": self.sync}
        if self.sync == "average":
            sync["average_every"] = int(self.average_every)
        elif self.sync == "ssp":
            sync["staleness"] = self.staleness
        last = self.checkpoint_
        return {
            "source": "dmlsearch.training.DataParallelTrainer",
            **sync,
            "world_size": int(self.n_workers_),
            "epochs": len(self.history_),
            "batch_size": int(self.batch_size),
            "shuffle": bool(self.shuffle),
            "random_state": self.random_state
            if isinstance(self.random_state, numbers.Integral)
            else None,
            "resumed": list(self.resumed_),
            "checkpoint": None if last is None else {"epoch": last.epoch, "sha256": last.sha256},
            "history": [dict(e) for e in self.history_],
        }

    def _keep(self, checkpoint: Checkpoint) -> None:
        self.checkpoint_ = checkpoint

    def _train(
        self, client: Client, X: Any, y: Any, start: _Start, seed: int
    ) -> tuple[list[dict[str, Any]], _Start, int]:
        """Run the job on a gang; with ``elastic``, again from the last checkpoint on a loss."""
        k = int(self.n_workers)
        while True:
            try:
                with reserve(client, k, name="training") as gang:
                    return self._run(client, gang, X, y, start, seed), start, k
            except TrainingError as exc:
                lost = isinstance(exc.__cause__, GangWorkerLostError)
                if not (self.elastic and lost) or len(self.resumed_) >= MAX_RESUMES:
                    raise
                k = min(int(self.n_workers), len(alive_workers(client)))
                if k < 1:
                    raise
                last = self.checkpoint_
                if last is not None:
                    start = _Start(last.bytes(self.registry), last.epoch, last.history)
                self.resumed_.append({"epoch": start.epoch, "worker": exc.worker, "n_workers": k})
                logger.warning(
                    "dmlsearch: worker %s lost; training resumes from epoch %d on %d workers",
                    exc.worker,
                    start.epoch,
                    k,
                )

    def _run(
        self, client: Client, gang: Gang, X: Any, y: Any, start: _Start, seed: int
    ) -> list[dict[str, Any]]:
        n, w, b = int(X.shape[0]), gang.size, int(self.batch_size)
        workers = alive_workers(client, running=False)
        shards = place_shards(client, gang.workers, X, y)
        first = gang.workers[0]
        port = client.run(free_port, workers=[first])[first]
        checkpoints = CheckpointInbox(client, self.registry, self._keep, list(start.history))
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
        )
        args = [
            (job, r, int(workers.get(wk, {}).get("nthreads", 1)), *shards[r])
            for r, wk in enumerate(gang.workers)
        ]
        try:
            if self.sync == "ssp":
                return self._run_ssp(client, gang, job, args, checkpoints)
            results: list[dict[str, Any]] = gang.run(train_rank, args, on_tick=checkpoints.poll)
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
            raise TrainingError(
                f"training failed: {exc}; {where}",
                worker=exc.worker,
                rank=exc.rank,
                checkpoint=last,
            ) from exc
        finally:
            checkpoints.delete()

    def _run_ssp(
        self,
        client: Client,
        gang: Gang,
        job: JobSpec,
        args: list[tuple[Any, ...]],
        checkpoints: CheckpointInbox,
    ) -> list[dict[str, Any]]:
        """Ranks push to and pull from a parameter server (a Dask actor on rank 0's worker)."""
        first = gang.workers[0]
        server = client.submit(
            ParameterServer, job, actor=True, workers=[first], allow_other_workers=False
        )
        ps: Any = server.result()  # an Actor: its methods return futures
        ranks = [(*a, ps, self.staleness) for a in args]
        # No collectives, so a fast rank may end long before a slow one: no finish_grace.
        results: list[dict[str, Any]] = gang.run(
            train_ssp_rank, ranks, on_tick=checkpoints.poll, finish_grace=None
        )
        checkpoints.poll()
        final = client.submit(server_state, ps, job.epochs, workers=[first], pure=False)
        results[0]["state"] = state = final.result()
        every = job.checkpoint_every
        if every and job.epochs % every == 0:
            # Rank 0 published its last epoch before the slower ranks' last steps.
            checkpoints.store(job.epochs, state, results[0]["history"])
        return results
