"""A training job's report: its settings, status, model version(s), epochs and plots.

A job (``config["kind"] == "train"``) has no trials: the search sections would be empty.
What it ran is in the lineage of the version(s) registered from it (``history``,
``world_size``, ``resumed``, ...); what was asked is in the experiment's ``config``. A job
that registered nothing has only the latter, and the report says so.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._jobs import is_training_job, job_versions
from ._common import _finite, _text
from ._markup import (
    _cluster_rows,
    _config_sections,
    _figure_section,
    _page,
    _table,
    _when,
)
from ._training_plots import TRAINING_FIGURES, training_figures

if TYPE_CHECKING:
    from ..registry import ExperimentRecord, ModelVersionRecord, Registry

__all__ = ["TRAINING_FIGURES", "is_training_job", "job_figures", "load_job", "training_report"]

#: The epoch table's columns: ``history`` key -> title. Other keys follow, by name.
_EPOCH_COLUMNS = {
    "epoch": "epoch",
    "loss": "loss",
    "seconds": "seconds",
    "samples_per_s": "samples/s",
    "sync_s": "sync (s)",
    "sync_rounds": "sync rounds",
    "max_lag": "max lag (ssp)",
}
#: What each status means for a job, and why a job in it may have no version.
_STATUS = {
    "complete": "trained every epoch",
    "running": "still training, or its driver stopped without recording an end",
    "failed": "ended with an error: a rank raised, or a worker was lost",
    "interrupted": "stopped by an interrupt (Ctrl-C) before the end",
}


@dataclass(frozen=True)
class Job:
    """A training job read from the registry: its experiment and the versions it produced."""

    exp: ExperimentRecord
    #: Oldest first.
    versions: list[ModelVersionRecord]
    #: The newest version's lineage (what ran); empty when no version was registered.
    ran: dict[str, Any] = field(default_factory=dict)

    @property
    def history(self) -> list[dict[str, Any]]:
        history = self.ran.get("history")
        return [e for e in history if isinstance(e, dict)] if isinstance(history, list) else []

    @property
    def resumed(self) -> list[dict[str, Any]]:
        resumed = self.ran.get("resumed")
        return [r for r in resumed if isinstance(r, dict)] if isinstance(resumed, list) else []


def load_job(registry: Registry, exp: ExperimentRecord) -> Job:
    versions = sorted(job_versions(registry, exp), key=lambda v: (v.created, v.model, v.version))
    return Job(exp, versions, dict(versions[-1].lineage) if versions else {})


def _sync_text(sync: Any, params: Mapping[str, Any]) -> str:
    """The sync mode with its parameter, as a reader of docs/training.md names it."""
    if sync == "average":
        return f"average (parameters averaged every {_text(params.get('average_every'))} steps)"
    if sync == "ssp":
        staleness = params.get("staleness")
        if staleness is None:
            return "ssp (no staleness bound: fully asynchronous)"
        return f"ssp (staleness {_text(staleness)})"
    if sync == "allreduce":
        return "allreduce (gradients averaged every step)"
    return "-" if sync is None else _text(sync)


def _resume_text(r: Mapping[str, Any]) -> str:
    if "checkpoint" in r:  # dmlsearch resume (DataParallelTrainer(resume=True))
        sha = r.get("checkpoint")
        source = "no checkpoint" if sha is None else f"checkpoint {str(sha)[:12]}"
        return (
            f"after epoch {_text(r.get('epoch'))}: resumed from {source} "
            f"on {_text(r.get('n_workers'))} worker(s)"
        )
    return (
        f"after epoch {_text(r.get('epoch'))}: worker {_text(r.get('worker'))} lost, "
        f"{_text(r.get('n_workers'))} worker(s) after"
    )


def _settings(job: Job) -> str:
    """Setting | asked (the experiment's config) | as run (the newest version's lineage)."""
    asked, ran = job.exp.config, job.ran
    none = "-" if ran else "(no version)"

    def got(key: str) -> Any:
        return ran.get(key, "-") if ran else none

    checkpoint = ran.get("checkpoint")
    last = (
        f"epoch {_text(checkpoint.get('epoch'))} (sha256 {str(checkpoint.get('sha256'))[:12]})"
        if isinstance(checkpoint, dict)
        else "none taken"
    )
    resumes = "; ".join(_resume_text(r) for r in job.resumed) or "none"
    world, batch = ran.get("world_size"), ran.get("batch_size", asked.get("batch_size"))
    global_batch = "-"
    if isinstance(world, int) and isinstance(batch, int):
        global_batch = str(world * batch)
    rows: list[list[Any]] = [
        ["module", asked.get("module", "-"), "-"],
        [
            "sync",
            _sync_text(asked.get("sync"), asked),
            _sync_text(ran.get("sync"), ran) if ran else none,
        ],
        ["workers (world size)", asked.get("n_workers", "-"), got("world_size")],
        ["epochs", asked.get("epochs", "-"), len(job.history) if ran else none],
        ["batch size per rank", asked.get("batch_size", "-"), got("batch_size")],
        ["global batch (all ranks)", "-", global_batch if ran else none],
        ["shuffle", asked.get("shuffle", "-"), got("shuffle")],
        ["random_state", asked.get("random_state", "-"), got("random_state")],
        ["device", asked.get("device", "-"), got("device")],
        ["backend", asked.get("backend", "-"), got("backend")],
        ["rank devices", "-", ", ".join(map(str, ran.get("rank_devices") or [])) or none],
        [
            "checkpoint_every / last checkpoint",
            asked.get("checkpoint_every", "-"),
            last if ran else none,
        ],
        ["elastic / resumes", asked.get("elastic", "-"), resumes if ran else none],
    ]
    return _table(["setting", "asked (job config)", "as run (version lineage)"], rows, "summary")


def _status_text(job: Job) -> str:
    status = job.exp.status
    meaning = _STATUS.get(status, "")
    if status == "running" and job.versions:
        meaning = "a version was registered, but the driver stopped before recording the end"
    return f"{status} ({meaning})" if meaning else status


def _time_rows(history: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    seconds = [float(e["seconds"]) for e in history if _finite(e.get("seconds"))]
    syncs = [float(e["sync_s"]) for e in history if _finite(e.get("sync_s"))]
    if not seconds:
        return []
    total = math.fsum(seconds)
    rows: list[list[Any]] = [["training time (s, sum of epochs)", total]]
    if len(syncs) == len(seconds) and total > 0:
        share = math.fsum(syncs) / total
        rows.append(["time in sync (s)", f"{math.fsum(syncs):.6g} ({share:.1%} of it)"])
    return rows


def _summary(job: Job) -> str:
    exp, history = job.exp, job.history
    rows: list[list[Any]] = [
        ["kind", "training job (DataParallelTrainer)"],
        ["status", _status_text(job)],
        ["created", _when(exp.created)],
        ["model versions", len(job.versions)],
    ]
    if history:
        rows.append(["final loss", history[-1].get("loss", "-")])
    rows += _time_rows(history)
    resumes = exp.config.get("resumes")
    if isinstance(resumes, list) and resumes:
        rows.append(["resumed", "; ".join(_resume_text(r) for r in resumes if isinstance(r, dict))])
    rows.append(["data fingerprint", exp.data_fingerprint or "-"])
    rows += _cluster_rows(exp)
    return _table(["field", "value"], rows, "summary")


def _checkpoint_text(exp: ExperimentRecord) -> str:
    """The unfinished job's recorded checkpoint, what a resume starts from."""
    last = exp.config.get("checkpoint")
    if not isinstance(last, dict):
        return (
            "No checkpoint is recorded: <code>dmlsearch resume FILE</code> would train it "
            "from epoch 0."
        )
    return (
        f"Its last checkpoint (epoch {html.escape(_text(last.get('epoch')))}, sha256 "
        f"{html.escape(str(last.get('sha256'))[:12])}) is recorded with the job: "
        "<code>dmlsearch resume FILE</code> continues from it, and <code>Registry.gc()</code> "
        "keeps it until the job completes or is deleted."
    )


def _no_version(job: Job) -> str:
    why = {
        "failed": "it failed before registering",
        "interrupted": "it was interrupted before registering",
        "running": "it has not finished (or its driver stopped without recording an end)",
        "complete": "it completed, but registering failed (fit warned 'model_ was not "
        "registered') or its versions were deleted since",
    }.get(job.exp.status, f"its status is {job.exp.status}")
    unfinished = "" if job.exp.status == "complete" else " " + _checkpoint_text(job.exp)
    return (
        f"<p>No model version in this registry was registered from this job: {html.escape(why)}. "
        "The registry keeps what a job ran (its epochs, world size, resumes) in a "
        "registered version's lineage, so this report has no epochs to show; the settings "
        f"above are what was asked.{unfinished}</p>"
    )


def _versions(job: Job) -> str:
    if not job.versions:
        return _no_version(job)
    rows = [
        [
            v.model,
            v.version,
            _when(v.created),
            v.metrics.get("loss", "-"),
            v.metrics.get("samples_per_s", "-"),
            v.lineage.get("epochs", "-"),
            ", ".join(v.aliases) or "-",
        ]
        for v in job.versions
    ]
    header = [
        "model",
        "version",
        "created",
        "loss (final)",
        "samples/s (mean)",
        "epochs",
        "aliases",
    ]
    return _table(header, rows)


def _epochs(job: Job) -> str:
    history = job.history
    if not history:
        return (
            "<p>No epochs recorded" + (" (no model version)" if not job.versions else "") + ".</p>"
        )
    keys = [k for k in _EPOCH_COLUMNS if any(k in e for e in history)]
    keys += sorted({k for e in history for k in e} - set(_EPOCH_COLUMNS))
    rows = [[e.get(k, "-") for k in keys] for e in history]
    newest = job.versions[-1]
    note = (
        f"<p class='meta'>From the lineage of {html.escape(newest.model)} v{newest.version}. "
        "loss: mean over steps and ranks; seconds: rank 0's epoch; samples/s: rows of all ranks "
        "per second; sync (s): time in the synchronising collectives (ssp: waiting, pulling "
        "and pushing), mean over ranks.</p>"
    )
    return note + _table([_EPOCH_COLUMNS.get(k, k) for k in keys], rows, "epochs")


def job_figures(job: Job) -> dict[str, tuple[bytes, str]]:
    """The job's plots (PNG, caption) by name; none without recorded epochs."""
    if not job.history:
        return {}
    return training_figures(job.history, job.resumed)


def training_report(registry: Registry, exp: ExperimentRecord) -> str:
    """The whole HTML document of training job ``exp``."""
    job = load_job(registry, exp)
    parts = [
        "<h2>Summary</h2>",
        _summary(job),
        "<h2>Training</h2>",
        _settings(job),
        f"<h2>Model versions</h2>{_versions(job)}",
        f"<h2>Epochs</h2>{_epochs(job)}",
    ]
    for name, (png, caption) in job_figures(job).items():
        parts.append(_figure_section(TRAINING_FIGURES[name], png, caption))
    parts += _config_sections(exp)
    return _page(exp, "Training job", parts)
