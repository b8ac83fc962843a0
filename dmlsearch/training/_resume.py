"""Resuming a training job from the last checkpoint its experiment records.

A job whose driver was lost (Ctrl-C, SIGKILL, the scheduler gone) keeps its experiment in
the registry with its settings and last checkpoint (:mod:`._record`). A resume checks that
the job is unfinished and that the settings that decide what is trained are the ones it
ran with, then continues from that checkpoint: the model's and optimizer's state, the
epoch, and the figures of the epochs before it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from .._jobs import JOB_KIND
from .._recording import driver_stamp
from ..exceptions import InvalidParameterError, JobCompleteError
from ._checkpoint import Checkpoint, Start
from ._record import JobRecord, job_config

__all__ = ["FIXED", "check_resumable", "open_job", "reopen_job"]

logger = logging.getLogger("dmlsearch")

#: The settings a resume must not change, and what the message calls them. A key the
#: stored config lacks (a job recorded before it was kept) is not compared.
FIXED = {
    "module": "the model's class",
    "model_fn": "the model",
    "parameters": "the model's parameters (their names or shapes)",
    "loss_fn": "the loss",
    "optimizer_fn": "the optimizer",
    "sync": "sync",
    "average_every": "average_every",
    "staleness": "staleness",
    "batch_size": "batch_size",
    "shuffle": "shuffle",
    "random_state": "random_state",
}


def _stored(value: Any) -> Any:
    """``value`` as the registry's JSON gives it back (tuples as lists)."""
    return json.loads(json.dumps(value, default=repr))


def check_resumable(registry: Any, name: str, epochs: Any = None) -> Any:
    """The experiment of training job ``name``, if it can be resumed; else the error.

    No experiment, or a search's, or one whose driver may still be running it
    (:func:`dmlsearch._experiment.check_not_running`): InvalidParameterError. A finished
    job: :class:`JobCompleteError` (naming ``epochs``, asked for now, where they are more).
    """
    from ..registry import NotFoundError

    try:
        exp = registry.store.get_experiment(name)
    except NotFoundError:
        raise InvalidParameterError(
            "resume",
            f"there is no experiment {name!r} in {registry.shown_url} to resume: run it first, or "
            "drop resume (resume=False) to start it",
        ) from None
    if not isinstance(exp.config, dict) or exp.config.get("kind") != JOB_KIND:
        raise InvalidParameterError(
            "resume", f"experiment {name!r} is a search, not a training job; resume it as one"
        )
    if exp.status == "complete":
        trained = exp.config.get("epochs")
        more = ""
        if isinstance(epochs, int) and isinstance(trained, int) and epochs > trained:
            more = (
                f"; {epochs} epochs are asked for now, but a finished job does not train on: "
                "train it again under another name (or run the file with --overwrite)"
            )
        raise JobCompleteError(
            name,
            f"training job {name!r} is already complete (its {trained} epochs were trained "
            f"and its model registered): nothing to resume{more}",
        )
    from .._experiment import check_not_running

    check_not_running(registry.store, exp)
    return exp


def _changes(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between the settings a job ran with and these, as readable lines."""
    changed = [
        f"{label}: {stored[key]!r} -> {current.get(key)!r}"
        for key, label in FIXED.items()
        if key in stored and stored[key] != _stored(current.get(key))
    ]
    if int(current["epochs"]) < int(stored.get("epochs", 0)):
        changed.append(
            f"epochs lowered: {stored['epochs']} -> {current['epochs']} (raising them is allowed)"
        )
    return changed


def reopen_job(
    registry: Any, name: str, config: dict[str, Any], fingerprint: str
) -> tuple[JobRecord, Checkpoint | None]:
    """The record of unfinished training job ``name`` and its last checkpoint (None: none).

    Refused (InvalidParameterError, nothing written) when the data or a setting of
    :data:`FIXED` differs from the job's, or ``epochs`` is lowered; a finished job raises
    :class:`JobCompleteError`. The record's config is this run's settings with the job's
    checkpoint and resumes; the caller records the resume with :meth:`JobRecord.restart`.
    """
    exp = check_resumable(registry, name, config.get("epochs"))
    if exp.data_fingerprint not in (None, fingerprint):
        raise InvalidParameterError(
            "resume",
            f"the data differs from the data training job {name!r} started with; resume with "
            "the same data, or train it again under another experiment_name",
        )
    changed = _changes(exp.config, config)
    if changed:
        raise InvalidParameterError(
            "resume",
            f"cannot resume training job {name!r}: its settings changed since it started "
            f"({'; '.join(changed)}). Resume with the settings it ran with, or train it again "
            "under another experiment_name (or delete it first)",
        )
    kept = {k: exp.config[k] for k in ("checkpoint", "resumes") if k in exp.config}
    previous = (exp.status, dict(exp.config))
    record = JobRecord(
        registry, exp.id, exp.name, {**config, **kept, "driver": driver_stamp()}, previous=previous
    )
    last = kept.get("checkpoint")
    if not isinstance(last, dict):
        return record, None
    checkpoint = Checkpoint(
        int(last["epoch"]),
        str(last["sha256"]),
        last.get("uri"),
        history=tuple(dict(h) for h in last.get("history", [])),
    )
    return record, checkpoint


def open_job(
    trainer: Any, cluster: dict[str, Any], model: Any, start: Start
) -> tuple[JobRecord, Start]:
    """``trainer``'s job recorded: a new experiment; or with ``resume``, the job's, reopened
    at its last checkpoint (then ``trainer.checkpoint_`` and ``resumed_`` say so)."""
    config = job_config(trainer, model)
    name = str(trainer.experiment_name)
    if not trainer.resume:
        record = JobRecord.open(trainer.registry, name, config, trainer.data_fingerprint_, cluster)
        return record, start
    record, last = reopen_job(trainer.registry, name, config, trainer.data_fingerprint_)
    if last is not None:  # its sha256 is checked as it is read
        start = Start(last.bytes(trainer.registry), last.epoch, last.history)
        trainer.checkpoint_ = last
    resumed = {
        "epoch": start.epoch,
        "checkpoint": None if last is None else last.sha256,
        "n_workers": int(trainer.n_workers),
    }
    record.restart(resumed)
    trainer.resumed_.append(resumed)
    if last is None:
        logger.warning(
            "dmlsearch: training job %r recorded no checkpoint; it trains again from epoch 0",
            name,
        )
    else:
        logger.warning(
            "dmlsearch: training job %r resumes from its checkpoint of epoch %d (%s); "
            "%d of %d epochs to train",
            name,
            last.epoch,
            last.sha256[:12],
            max(0, int(trainer.epochs) - last.epoch),
            int(trainer.epochs),
        )
    return record, start
