"""The dashboard's in-memory state on the scheduler: events in, a bounded snapshot out.

Pure Python (no Dask, no tornado), so it is tested on its own. Drivers send batches of
events (``dict`` with a ``kind``); unknown kinds are ignored, so a newer driver can talk to
an older scheduler and later capabilities add kinds of their own (``rung_submitted`` and
``rung_ended``: a multi-fidelity search's rung steps, for the rung view; ``ranks`` and
``epoch``: a data-parallel training job's ranks and epochs, for the job view).

Each experiment keeps its JSON until an event changes it (a version number), and a poll
gets the finished experiments it does not show in full as summaries whose size does not
grow with their trials, so polling costs the scheduler little however many are kept.
"""

from __future__ import annotations

import heapq
import json
import math
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DETAIL_NEWEST",
    "DISCONNECTED",
    "LEADERBOARD",
    "MAX_EPOCHS",
    "MAX_EXPERIMENTS",
    "MAX_FINISHED",
    "MAX_HISTORY",
    "MAX_PAUSED",
    "MAX_PROMOTIONS",
    "MAX_REQUESTED",
    "MAX_RUNGS",
    "MAX_WORKERS",
    "DashboardState",
    "ExperimentView",
]

#: Finished trials kept per experiment for the page (aggregates count every trial).
MAX_FINISHED = 200
#: Best-so-far points kept per experiment (improvements only; past it, older points are
#: thinned, the latest is always kept).
MAX_HISTORY = 1000
#: Experiments kept; the oldest finished ones are dropped first.
MAX_EXPERIMENTS = 50
LEADERBOARD = 10
#: Workers counted by name per experiment; later ones are counted together.
MAX_WORKERS = 256
#: Rungs (distinct resources) shown per experiment; steps at further ones are not counted.
MAX_RUNGS = 64
#: Latest promotions kept per experiment for the page (the rungs count every one).
MAX_PROMOTIONS = 50
#: A training job's latest epochs kept for its loss curve.
MAX_EPOCHS = 1000
#: A running multi-fidelity search's trials waiting for a promotion, kept by number (to
#: count each trial once, when it ends); past it they are counted by resource only.
MAX_PAUSED = 100_000
#: Finished experiments sent in full with every poll, newest first (others as summaries).
DETAIL_NEWEST = 3
#: Further experiments a poll may ask to have in full (``?experiment=<name>``).
MAX_REQUESTED = 10
#: Why an experiment became ``interrupted`` when its driver's client left the scheduler.
DISCONNECTED = "driver disconnected"


def _clean(obj: Any) -> Any:
    """JSON has no NaN or infinity: send them as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _resource(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class ExperimentView:
    """What the page shows of one experiment."""

    name: str
    meta: dict[str, Any] = field(default_factory=dict)
    status: str = "running"
    started: float = field(default_factory=time.time)
    #: When the status left ``running`` (None while it runs).
    ended_at: float | None = None
    #: Why it ended, where the driver could not say (:data:`DISCONNECTED`).
    reason: str | None = None
    #: The id of the Dask client whose driver reports it (None: an older driver).
    client: str | None = None
    #: Bumped on every event: the page's JSON of the experiment is rebuilt only then.
    version: int = 0
    _json: dict[bool, tuple[int, str]] = field(default_factory=dict)
    running: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_FINISHED))
    # Rows of the page by state: trials, or a multi-fidelity search's rung steps.
    states: Counter[str] = field(default_factory=Counter)
    # Trials ended, by their final state, each counted once (the Prometheus counter). A
    # multi-fidelity search's trial ends when a step of it fails, or, having completed a
    # step, when the search ends without promoting it from there: meanwhile it waits in
    # ``_paused`` (trial -> resource; past MAX_PAUSED, counted by resource only).
    trial_states: Counter[str] = field(default_factory=Counter)
    stepped: bool = False
    _paused: dict[int, int] = field(default_factory=dict)
    _paused_over: Counter[int] = field(default_factory=Counter)
    _top: int = 0
    per_worker: Counter[str] = field(default_factory=Counter)
    # A min-heap of (resource, sign * value, -number, row): the worst of the kept best is
    # popped first (sign: -1 for a minimized objective, see ``sign``; resource: the budget
    # a multi-fidelity step trained to, 0 otherwise, ranked first as ``best_index_`` does).
    _board: list[tuple[int, float, int, dict[str, Any]]] = field(default_factory=list)
    history: list[tuple[float, float]] = field(default_factory=list)
    best: float | None = None
    _best_key: tuple[int, float] | None = None
    # A multi-fidelity search's rung view: counts per resource, the steps in flight by
    # (trial, resource), the latest promotions.
    rungs: dict[int, dict[str, Any]] = field(default_factory=dict)
    rung_running: dict[tuple[int, int], float] = field(default_factory=dict)
    promotions: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_PROMOTIONS))
    # A data-parallel training job: its ranks, latest epoch and loss curve (None: a search).
    training: dict[str, Any] | None = None
    curve: deque[tuple[int, float | None]] = field(default_factory=lambda: deque(maxlen=MAX_EPOCHS))

    def _job(self) -> dict[str, Any]:
        if self.training is None:
            self.training = {
                "ranks": [],
                "epoch": 0,
                "loss": None,
                "samples_per_s": None,
                "seconds": None,
                "runs": 0,
            }
        return self.training

    def job_ranks(self, rows: list[Any]) -> None:
        """A training job's ranks started: ``[rank, worker, start_epoch]`` each.

        Sent again when an elastic job resumes on a new gang from its checkpoint: the
        epochs after that checkpoint leave the curve (they run again).
        """
        job = self._job()
        start = int(rows[0][2]) if rows else 0
        job["ranks"] = [
            {"rank": int(rank), "worker": str(worker)} for rank, worker, *_ in rows[:MAX_WORKERS]
        ]
        job["runs"] += 1
        job["epoch"] = min(job["epoch"], start)
        while self.curve and self.curve[-1][0] > start:
            self.curve.pop()

    def job_epochs(self, rows: list[Any]) -> None:
        """A training job's epochs ended: ``[epoch, loss, samples_per_s, seconds]`` each."""
        job = self._job()
        for epoch, loss, rate, seconds, *_ in rows:
            epoch = int(epoch)
            if epoch <= job["epoch"]:
                continue  # already shown (the driver sends its final figures again)
            job.update(
                epoch=epoch,
                loss=_number(loss),
                samples_per_s=_number(rate),
                seconds=_number(seconds),
            )
            self.curve.append((epoch, job["loss"]))

    @property
    def sign(self) -> float:
        """1.0 when greater values are better, -1.0 for ``meta["direction"] == "minimize"``."""
        return -1.0 if self.meta.get("direction") == "minimize" else 1.0

    def better(self, value: float, than: float) -> bool:
        """Whether ``value`` is better than ``than`` in the experiment's direction."""
        return self.sign * value > self.sign * than

    def _rung(self, resource: int, rung: int = 0) -> dict[str, Any] | None:
        row = self.rungs.get(resource)
        if row is None and len(self.rungs) < MAX_RUNGS:
            row = self.rungs[resource] = {
                "resource": resource,
                "rung": rung,
                "trials": 0,
                "running": 0,
                "complete": 0,
                "failed": 0,
                "promoted": 0,
                "restored": 0,
                "best": None,
            }
        return row

    def rung_submitted(self, steps: list[Any]) -> None:
        """Rung steps sent: ``[trial, rung, resource, from_resource, bracket, ...]``.

        A step with ``from_resource > 0`` is a promotion (into its rung); a step sent again
        (a retry) while it runs counts once.
        """
        now = time.time()
        for trial, rung, resource, start, bracket, *_ in steps:
            key = (int(trial), int(resource))
            self._top = max(self._top, key[1])
            if int(start) > 0:
                self._promoted(key[0], int(start))
            row = self._rung(key[1], int(rung))
            if row is None or key in self.rung_running:
                continue
            self.rung_running[key] = now
            row["trials"] += 1
            row["running"] += 1
            if int(start) > 0:
                row["promoted"] += 1
                self.promotions.append(
                    {
                        "trial": key[0],
                        "from": int(start),
                        "to": key[1],
                        "bracket": int(bracket),
                        "at": now,
                    }
                )

    def rung_ended(self, steps: list[Any]) -> None:
        """Rung steps ended: ``[trial, resource, state, value, restored, ...]``.

        ``restored``: recorded by an earlier run of the experiment (resume), never sent
        in this one.
        """
        for trial, resource, state, value, *rest in steps:
            key = (int(trial), int(resource))
            self._top = max(self._top, key[1])
            row = self._rung(key[1])
            if row is None:
                continue
            if self.rung_running.pop(key, None) is not None:
                row["running"] -= 1
            else:  # restored, or its start never reached this page
                row["trials"] += 1
                row["restored"] += int(bool(rest and rest[0] is True))
            row["complete" if str(state) == "complete" else "failed"] += 1
            v = _number(value)
            if v is not None and (row["best"] is None or self.better(v, row["best"])):
                row["best"] = v

    def _promoted(self, trial: int, start: int) -> None:
        """``trial`` goes on from its step at ``start``: it has not ended there."""
        if self._paused.pop(trial, None) is None and self._paused_over[start] > 0:
            self._paused_over[start] -= 1

    def _step_ended(self, trial: int, state: str, resource: int) -> None:
        """A multi-fidelity step ended: a failed one ends its trial, a complete one pauses
        it until it is promoted or the search ends."""
        self.stepped = True
        self._top = max(self._top, resource)
        self._paused.pop(trial, None)
        if state != "complete":
            self.trial_states[state] += 1
        elif len(self._paused) < MAX_PAUSED:
            self._paused[trial] = resource
        else:
            self._paused_over[resource] += 1

    def end(self, status: str, reason: str | None = None) -> None:
        """The experiment ended: nothing of it runs any more.

        A multi-fidelity search's trials waiting for a promotion end here: ``complete``
        where they reached the largest resource the search did, else ``pruned`` (stopped
        by the scheduler below it).
        """
        self.status, self.reason = status, reason
        self.ended_at = time.time()
        self.running.clear()
        self.rung_running.clear()
        for row in self.rungs.values():
            row["running"] = 0
        waiting = Counter(self._paused.values()) + self._paused_over
        for resource, count in waiting.items():
            self.trial_states["complete" if resource >= self._top else "pruned"] += count
        self._paused.clear()
        self._paused_over.clear()

    def submitted(self, trials: list[Any]) -> None:
        now = time.time()
        for number, params in trials:
            self.running[int(number)] = {"number": int(number), "params": params, "since": now}

    def ended(self, trials: list[Any]) -> None:
        # [number, state, value, worker, duration, params, error, resource, ...]: fields a
        # newer driver adds at the end are ignored; error and resource came after the
        # first release.
        for number, state, value, worker, duration, params, *rest in trials:
            number = int(number)
            entry = self.running.pop(number, None)
            error = rest[0] if rest and isinstance(rest[0], str) else None
            resource = _resource(rest[1]) if len(rest) > 1 else None
            row = {
                "number": number,
                "state": str(state),
                "value": _number(value),
                "worker": str(worker or ""),
                "duration": _number(duration),
                "params": params if params is not None else (entry or {}).get("params", {}),
                "error": error,
                "resource": resource,
            }
            self.finished.append(row)
            self.states[row["state"]] += 1
            if resource is None:
                self.trial_states[row["state"]] += 1
            else:
                self._step_ended(number, row["state"], resource)
            if row["worker"] in self.per_worker or len(self.per_worker) < MAX_WORKERS:
                self.per_worker[row["worker"]] += 1
            else:  # a long-lived cluster whose workers come and go: bounded all the same
                self.per_worker["(other workers)"] += 1
            v = row["value"]
            if v is None:
                continue
            # Signed so that the heap's smallest is the worst kept in either direction.
            item = (resource or 0, self.sign * v, -number, row)
            if len(self._board) < LEADERBOARD:
                heapq.heappush(self._board, item)
            elif item[:3] > self._board[0][:3]:
                heapq.heapreplace(self._board, item)
            if self._best_key is None or item[:2] > self._best_key:
                self._best_key = item[:2]
                self.best = v
                if len(self.history) >= MAX_HISTORY:
                    # Bounded: every other older point goes, the first stays, and the
                    # latest improvement is always appended.
                    del self.history[1::2]
                self.history.append((time.time() - self.started, v))

    @property
    def leaderboard(self) -> list[dict[str, Any]]:
        ranked = sorted(self._board, key=lambda t: (-t[0], -t[1], -t[2]))
        return [row for *_, row in ranked]

    def snapshot(self, detail: bool = True) -> dict[str, Any]:
        """What the page shows of it; ``detail=False``: a summary of a size that does not
        grow with its trials (status, counts, best: the overview and its stats line)."""
        training = None if self.training is None else {**self.training}
        snap: dict[str, Any] = {
            "name": self.name,
            "meta": self.meta,
            "status": self.status,
            "reason": self.reason,
            "started": self.started,
            "ended": self.ended_at,
            "detail": detail,
            "counts": dict(self.states),
            "trial_states": dict(self.trial_states),
            "done": sum(self.states.values()),
            "in_flight": len(self.running),
            "best": self.best,
            "training": training,
        }
        if not detail:
            return snap
        if training is not None:
            training["curve"] = list(self.curve)
        return {
            **snap,
            "running": sorted(self.running.values(), key=lambda r: r["number"]),
            "finished": list(reversed(self.finished)),
            "leaderboard": self.leaderboard,
            "history": list(self.history),
            "per_worker": dict(self.per_worker),
            "rungs": [dict(self.rungs[r]) for r in sorted(self.rungs)],
            "promotions": list(reversed(self.promotions)),
        }

    def to_json(self, detail: bool = True) -> str:
        """:meth:`snapshot` as JSON, built again only after an event changed the experiment
        (every time-dependent figure is an absolute time the page subtracts from)."""
        cached = self._json.get(detail)
        if cached is None or cached[0] != self.version:
            text = json.dumps(_clean(self.snapshot(detail)), default=str)
            cached = self._json[detail] = (self.version, text)
        return cached[1]


class DashboardState:
    """Experiments by name, fed by driver events; every part bounded in size."""

    def __init__(self) -> None:
        self.experiments: OrderedDict[str, ExperimentView] = OrderedDict()
        self.events = 0

    def _get(self, name: str) -> ExperimentView:
        view = self.experiments.get(name)
        if view is None:
            view = self.experiments[name] = ExperimentView(name)
            while len(self.experiments) > MAX_EXPERIMENTS:
                done = [k for k, v in self.experiments.items() if v.status != "running"]
                self.experiments.pop(done[0] if done else next(iter(self.experiments)))
        return view

    def apply(self, events: Any) -> None:
        """Apply one event or a list of them; malformed events are skipped, never raised."""
        # msgpack hands lists over as tuples.
        for event in events if isinstance(events, (list, tuple)) else [events]:
            if not isinstance(event, dict) or not isinstance(event.get("experiment"), str):
                continue
            self.events += 1
            view = self._get(event["experiment"])
            kind = event.get("kind")
            try:
                if kind == "experiment":
                    meta = dict(event.get("meta") or {})
                    if not meta.get("resume") and (view.states or view.running or view.training):
                        # The name used again for a new search: start its panel afresh.
                        view = self.experiments[view.name] = ExperimentView(view.name)
                    view.meta = meta
                    view.status, view.ended_at, view.reason = "running", None, None
                    if isinstance(event.get("client"), str):
                        view.client = event["client"]
                    self.experiments.move_to_end(view.name)  # the page lists newest first
                elif kind == "submitted":
                    view.submitted(list(event.get("trials") or []))
                elif kind == "ended":
                    view.ended(list(event.get("trials") or []))
                elif kind == "rung_submitted":
                    view.rung_submitted(list(event.get("trials") or []))
                elif kind == "rung_ended":
                    view.rung_ended(list(event.get("trials") or []))
                elif kind == "ranks":
                    view.job_ranks(list(event.get("trials") or []))
                elif kind == "epoch":
                    view.job_epochs(list(event.get("trials") or []))
                elif kind == "status":
                    status = str(event.get("status"))
                    if status == "running":
                        view.status = status
                    else:
                        view.end(status)
            except (TypeError, ValueError):
                continue  # a malformed batch from some client: the page must stay up
            finally:
                view.version += 1

    def client_gone(self, client: str) -> list[str]:
        """The driver whose Dask client is ``client`` left the scheduler (killed, say):
        its running experiments end ``interrupted``. Returns their names."""
        gone = [
            v for v in self.experiments.values() if v.client == client and v.status == "running"
        ]
        for view in gone:
            view.end("interrupted", DISCONNECTED)
            view.version += 1
        return [v.name for v in gone]

    def detailed(self, requested: Collection[str] = ()) -> set[str]:
        """The experiments a poll gets in full: the running ones, the newest
        :data:`DETAIL_NEWEST` finished ones and the first :data:`MAX_REQUESTED` of those
        ``requested``; every other one as a summary."""
        views = list(reversed(self.experiments.values()))
        finished = [v.name for v in views if v.status != "running"][:DETAIL_NEWEST]
        running = [v.name for v in views if v.status == "running"]
        return {*running, *finished, *list(requested)[:MAX_REQUESTED]}

    def snapshot(self, requested: Collection[str] | None = None) -> dict[str, Any]:
        """Every experiment, newest first; ``requested``: as a poll gets them
        (:meth:`detailed`), None: all in full."""
        full = None if requested is None else self.detailed(requested)
        return {
            "time": time.time(),
            "experiments": [
                v.snapshot(full is None or v.name in full)
                for v in reversed(self.experiments.values())
            ],
        }

    def to_json(self, requested: Collection[str] = ()) -> str:
        """A poll's answer (``/dmlsearch/api/state``): :meth:`snapshot` with ``requested``
        as JSON, from each experiment's cached JSON."""
        full = self.detailed(requested)
        parts = [v.to_json(v.name in full) for v in reversed(self.experiments.values())]
        return f'{{"time": {time.time()!r}, "experiments": [{", ".join(parts)}]}}'
