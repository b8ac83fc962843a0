"""What the registry keeps of a training job: an experiment of kind ``train``, and the
registered version's metrics and lineage.

A job with ``experiment_name`` and a registry is recorded as an experiment with no trials
(``config["kind"] == "train"``), so that ``dmlsearch list``, ``show`` and ``delete`` see it
as they see searches, and the trained model's version links to it (``lineage["experiment"]``).
No table changes: the experiment's ``config`` holds the job's settings, and while the job is
unfinished its last checkpoint (``config["checkpoint"]``: epoch, sha256, uri and the epochs'
figures), which keeps the checkpoint's blob from the garbage collector and is what
``resume`` continues from; ``config["resumes"]`` lists each resume.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import numbers
import warnings
from typing import Any

from .._jobs import JOB_KIND
from .._recording import driver_stamp, package_versions
from ..exceptions import InvalidParameterError
from ..registry import AlreadyExistsError
from ..space import describe_value

__all__ = ["JOB_KIND", "JobRecord", "job_config", "job_lineage", "job_metrics"]

logger = logging.getLogger("dmlsearch")

SOURCE = "dmlsearch.training.DataParallelTrainer"


def _sync(trainer: Any) -> dict[str, Any]:
    sync: dict[str, Any] = {"sync": trainer.sync}
    if trainer.sync == "average":
        sync["average_every"] = int(trainer.average_every)
    elif trainer.sync == "ssp":
        sync["staleness"] = trainer.staleness
    return sync


def _seed(trainer: Any) -> int | None:
    rs = trainer.random_state
    return int(rs) if isinstance(rs, numbers.Integral) else None


def _parameters(module: Any) -> str:
    """A digest of the module's parameter and buffer names and shapes."""
    shapes = ";".join(
        f"{k}:{tuple(getattr(v, 'shape', ()))}" for k, v in module.state_dict().items()
    )
    return hashlib.sha256(shapes.encode()).hexdigest()[:16]


def job_config(trainer: Any, module: Any) -> dict[str, Any]:
    """The experiment's ``config``: the kind, the module's class and the job's settings.

    ``model_fn``, ``loss_fn``, ``optimizer_fn`` (described as a resumed search's estimator
    is) and ``parameters`` (a digest of the state's names and shapes) let a resume tell
    whether the model changed.
    """
    return {
        "kind": JOB_KIND,
        "source": SOURCE,
        "module": type(module).__name__,
        "model_fn": describe_value(trainer.model_fn),
        "parameters": _parameters(module),
        "loss_fn": describe_value(trainer.loss_fn),
        "optimizer_fn": describe_value(trainer.optimizer_fn),
        **_sync(trainer),
        "epochs": int(trainer.epochs),
        "batch_size": int(trainer.batch_size),
        "n_workers": int(trainer.n_workers),
        "shuffle": bool(trainer.shuffle),
        "random_state": _seed(trainer),
        "device": trainer.device,
        "backend": trainer.backend,
        "checkpoint_every": trainer.checkpoint_every,
        "elastic": bool(trainer.elastic),
        "model_name": trainer.model_name,
    }


def job_metrics(history: list[dict[str, Any]]) -> dict[str, float]:
    """The version's metrics: the last epoch's ``loss``, the mean ``samples_per_s``."""
    rates = [e["samples_per_s"] for e in history]
    return {"loss": float(history[-1]["loss"]), "samples_per_s": float(sum(rates) / len(rates))}


def job_lineage(trainer: Any) -> dict[str, Any]:
    """The version's lineage (see ``DataParallelTrainer.register``)."""
    last = trainer.checkpoint_
    return {
        "source": SOURCE,
        **_sync(trainer),
        "world_size": int(trainer.n_workers_),
        "epochs": len(trainer.history_),
        "batch_size": int(trainer.batch_size),
        "shuffle": bool(trainer.shuffle),
        "random_state": _seed(trainer),
        "device": trainer.device_,
        "backend": trainer.backend_,
        "rank_devices": list(trainer.rank_devices_),
        "resumed": list(trainer.resumed_),
        "checkpoint": None if last is None else {"epoch": last.epoch, "sha256": last.sha256},
        "history": [dict(e) for e in trainer.history_],
    }


class JobRecord:
    """The experiment a training job is recorded as, from its start to its status.

    ``config`` is the experiment's as this process last wrote it; ``previous`` the status
    and config it had before a resume reopened it (None for a new job).
    """

    def __init__(
        self,
        registry: Any,
        experiment_id: int,
        name: str,
        config: dict[str, Any],
        previous: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        self.registry = registry
        self.id = experiment_id
        self.name = name
        self.config = dict(config)
        self.previous = previous

    @classmethod
    def open(
        cls,
        registry: Any,
        name: str,
        config: dict[str, Any],
        fingerprint: str,
        cluster: dict[str, Any],
    ) -> JobRecord:
        """Create the experiment (status ``running``); a name already taken is refused."""
        try:
            exp = registry.store.create_experiment(
                name,
                # Who runs it, so that a resume while it runs is refused (driver_stamp).
                config={**config, "driver": driver_stamp()},
                package_versions=package_versions(),
                data_fingerprint=fingerprint,
                cluster=cluster,
            )
        except AlreadyExistsError:
            raise InvalidParameterError(
                "experiment_name",
                f"an experiment called {name!r} already exists in {registry.shown_url}; choose "
                "another name, or delete it first (Registry.delete_experiment)",
            ) from None
        return cls(registry, exp.id, exp.name, exp.config)

    def discard(self) -> None:
        """Delete the experiment (a job refused before it ran); never raises."""
        try:
            self.registry.store.delete_experiment(self.id)
        except Exception as exc:
            logger.warning("dmlsearch: experiment %r was not deleted: %s", self.name, exc)

    def restart(self, resumed: dict[str, Any]) -> None:
        """Record a resume (``resumed``: its epoch and checkpoint) and the status ``running``."""
        self.config["resumes"] = [*self.config.get("resumes", []), dict(resumed)]
        self.registry.store.set_experiment_config(self.id, self.config)
        self.registry.store.set_experiment_status(self.id, "running")

    def refused(self) -> None:
        """Undo :meth:`restart` for a resume refused before any rank ran; never raises."""
        if self.previous is None:  # a new job: nothing was reopened
            return
        status, self.config = self.previous[0], dict(self.previous[1])
        with contextlib.suppress(Exception):  # close() warns if the registry is gone
            self.registry.store.set_experiment_config(self.id, self.config)
        self.close(status)

    def checkpoint(self, checkpoint: Any) -> None:
        """Record ``checkpoint`` as the job's last, the one a resume starts from; never
        raises (the training goes on, and the one recorded before stays recorded)."""
        self.config["checkpoint"] = {
            "epoch": int(checkpoint.epoch),
            "sha256": checkpoint.sha256,
            "uri": checkpoint.uri,
            "history": [dict(h) for h in checkpoint.history],
        }
        try:
            self.registry.store.set_experiment_config(self.id, self.config)
        except Exception as exc:
            warnings.warn(
                f"the checkpoint of epoch {checkpoint.epoch} of {self.name!r} was not "
                f"recorded: {exc}",
                UserWarning,
                stacklevel=3,
            )

    def close(self, status: str) -> None:
        """Record the job's final status; never raises (the training is not lost to it).

        A complete job's checkpoint is no longer recorded, so the garbage collector takes
        it; an interrupted or failed job's stays recorded for a resume.
        """
        try:
            # The status first: a job recorded complete is never resumed from epoch 0.
            self.registry.store.set_experiment_status(self.id, status)
            if status == "complete" and "checkpoint" in self.config:
                del self.config["checkpoint"]
                self.registry.store.set_experiment_config(self.id, self.config)
        except Exception as exc:
            warnings.warn(
                f"the status {status!r} of experiment {self.name!r} was not recorded: {exc}",
                UserWarning,
                stacklevel=3,
            )
