"""Opening a search's experiment in the registry, and resuming a recorded one.

What ``SearchCV``, the multi-fidelity search and :func:`dmlsearch.optimize` share: a
resume must run the same estimator, search space, schedule and cross-validation folds,
and gets back the exact parameters of every recorded trial (regenerated, or decoded from
their stored form). A resume of an experiment another driver may still be running is
refused (:func:`check_not_running`).
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ._recording import SearchRecorder, same_params
from .exceptions import InvalidParameterError

if TYPE_CHECKING:
    from ._recording import PriorRun
    from .registry import (
        ExperimentRecord,
        ModelVersionRecord,
        Registry,
        RegistryStore,
        TrialRecord,
    )
    from .search import SearchCV
    from .strategies import Strategy

__all__ = [
    "ACTIVE_SECONDS",
    "FORCE_RESUME",
    "CompleteRun",
    "already_complete",
    "folds_digest",
    "open_experiment",
    "recorded_params",
    "warn_recorded_beyond",
]

#: Seconds after a running experiment's last sign of life (a trial recorded, a driver
#: opening it) during which a resume from another host is refused: another driver may
#: still be running it (see :func:`check_not_running`).
ACTIVE_SECONDS = 120.0
#: Set (to anything but ``0``) in the environment, a resume skips that check.
FORCE_RESUME = "DMLSEARCH_FORCE_RESUME"


_RESUME_FIXED = {
    "estimator_spec": "estimator",
    "search_space_spec": "search_space",
    "schedule": "scheduler",  # a multi-fidelity search's (dmlsearch._schedule_plan)
    # Trials recorded by one strategy are not what another would propose: grid and random
    # ones no longer regenerate, and the record would name a strategy that ran no longer.
    "strategy": "strategy",
    # Recorded scores of other folds or another metric would rank beside the new ones.
    "n_splits": "cv",
    "scoring_spec": "scoring",
}
#: The sha256 of the folds' index arrays (:func:`folds_digest`): the same number of folds
#: holding other rows (another splitter, a shuffle with another seed) is refused too.
_FOLDS = "cv_folds"


def folds_digest(splits: Sequence[tuple[Any, Any]]) -> str:
    """The sha256 of every split's train and test index arrays, in order."""
    digest = hashlib.sha256()
    for train, test in splits:
        for rows in (train, test):
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            digest.update(len(rows).to_bytes(8, "little"))
            digest.update(rows.tobytes())
    return digest.hexdigest()


def _unseeded_shuffle(cv: Any) -> bool:
    """Whether splitter ``cv`` shuffles without an int ``random_state``: its folds differ
    from run to run (KFold(shuffle=True), ShuffleSplit() and the like)."""
    if not hasattr(cv, "split") or not hasattr(cv, "random_state"):
        return False
    seeded = isinstance(cv.random_state, int | np.integer)
    return not seeded and bool(getattr(cv, "shuffle", True))


def open_experiment(
    registry: Registry,
    name: str,
    config: dict[str, Any],
    *,
    resume: bool,
    owns: bool,
    metric: str,
    fingerprint: str,
    cluster: dict[str, Any],
    check: Callable[[dict[str, Any]], None] | None = None,
    cv: Any = None,
) -> tuple[SearchRecorder, PriorRun | None, str | None]:
    """Open (or, with ``resume``, reopen) experiment ``name``, its configuration checked.

    Returns the recorder, what an earlier run recorded (None for a new experiment) and
    the experiment's status before this run (to put back on a refused resume). ``check``
    may refuse the stored configuration first; ``owns``: close ``registry`` on a refusal.
    ``cv``: the search's splitter, named in the message of a resume whose folds changed.
    """
    from .registry import NotFoundError

    previous_status: str | None = None
    if resume:
        try:
            try:
                existing = registry.store.get_experiment(name)
            except NotFoundError:
                raise InvalidParameterError(
                    "resume",
                    f"there is no experiment {name!r} in the registry to resume: run it "
                    "first, or drop resume (resume=False) to start it",
                ) from None
            if check is not None:
                check(existing.config)
            same_data = existing.data_fingerprint in (None, fingerprint)
            _check_same_config(name, existing.config, _stored_form(config), same_data, cv)
            check_not_running(registry.store, existing)
        except BaseException:
            if owns:
                registry.close()
            raise
        previous_status = existing.status
    recorder = SearchRecorder(registry, name, metric=metric, owns_registry=owns)
    try:
        prior = recorder.open(
            resume=resume, config=config, fingerprint=fingerprint, cluster=cluster
        )
    except BaseException:
        if owns:
            registry.close()
        raise
    return recorder, prior, previous_status


def warn_recorded_beyond(name: str, prior: PriorRun, total: int | None, n_trials: Any) -> None:
    """Warn that a resume asks for fewer trials (``total``) than experiment ``name``
    records: no new trial starts."""
    recorded = len(prior.numbers)
    if total is None or recorded <= total:
        return
    warnings.warn(
        f"experiment {name!r} already records {recorded} trials, more than the {total} "
        f"this search asks for (n_trials={n_trials!r}), so no new trial starts; a larger "
        "n_trials continues it",
        UserWarning,
        stacklevel=4,
    )


@dataclass(frozen=True)
class CompleteRun:
    """A complete experiment a resume would add nothing to (:func:`already_complete`)."""

    experiment: ExperimentRecord
    #: How many trials it records, and how many the resume asks for (None: a
    #: multi-fidelity search asking for the n_trials it ran with).
    recorded: int
    asked: int | None
    #: Its best trial (None: none completed) and the latest version of its model
    #: registered from it (None: none was).
    best: TrialRecord | None
    version: ModelVersionRecord | None


def already_complete(registry: Registry, search: SearchCV) -> CompleteRun | None:
    """What experiment ``search.experiment_name`` holds, when resuming it with ``search``
    would run nothing new; else None (and the resume runs, or is refused, as usual).

    Decided from the registry and the search's arguments alone (no data, no cluster): the
    experiment is ``complete``, its estimator, search space, scoring and schedule are
    those it ran with, and it records every trial ``search`` asks for (trials 0 to
    ``n_trials - 1``, the whole grid for a grid search). A multi-fidelity search's trials
    depend on the data and on which the schedule promotes: it must ask for the
    ``n_trials`` it ran with, and have run without a ``time_budget`` (one may have ended it
    early). The data and folds are not compared here.
    """
    from ._schedule_plan import schedule_spec
    from .registry import NotFoundError
    from .space import as_space, describe_value
    from .strategies import make_strategy

    name = search.experiment_name
    if name is None:
        return None
    try:
        exp = registry.store.get_experiment(name)
    except NotFoundError:
        return None
    stored = exp.config
    if exp.status != "complete" or not isinstance(stored.get("seed"), int):
        return None
    multifidelity = search.scheduler is not None
    current = {
        "estimator_spec": describe_value(search.estimator),
        "search_space_spec": as_space(search.search_space).describe(),
        "scoring_spec": describe_value(search.scoring),
        **({"schedule": schedule_spec(search)} if multifidelity else {}),
    }
    for key, value in _stored_form(current).items():
        if key not in stored or _differences(stored[key], value, key):
            return None
    if multifidelity != ("schedule" in stored):
        return None
    numbers = {t.number for t in registry.store.get_trials(exp.id)}
    asked: int | None = None
    if multifidelity:
        if stored.get("n_trials") != search.n_trials or stored.get("time_budget") is not None:
            return None
    else:
        asked = make_strategy(search.strategy, as_space(search.search_space),
                              search.n_trials, stored["seed"]).total  # fmt: skip
        if asked is None or not set(range(asked)) <= numbers:
            return None
    best = registry.best_trials(exp.id, 1)
    return CompleteRun(
        exp, len(numbers), asked, best[0] if best else None, _version_of(registry, exp)
    )


def _version_of(registry: Registry, exp: ExperimentRecord) -> ModelVersionRecord | None:
    """The latest version of model ``exp.name`` registered from experiment ``exp``."""
    from .registry import NotFoundError

    try:
        versions = registry.store.list_model_versions(exp.name)
    except NotFoundError:
        return None
    mine = [v for v in versions if v.lineage.get("experiment_id") == exp.id]
    return mine[-1] if mine else None


def recorded_params(
    record: TrialRecord,
    strategy: Strategy,
    space: Any,
    name: str,
    refuse: Callable[[str], InvalidParameterError],
) -> dict[str, Any] | None:
    """The parameters of recorded trial ``record`` of experiment ``name`` under this run
    (None: beyond it); ``refuse(message)`` gives the error for a record it cannot match."""
    if strategy.adaptive:
        # Model-based trials come back from the registry in their stored (JSON)
        # form: decode them through the space, so object choices are objects again.
        try:
            return dict(space.decode(record.params, _stored_form))
        except ValueError as exc:
            raise refuse(
                f"experiment {name!r} recorded trial {record.number} with "
                f"{record.params}, which this search_space does not hold ({exc}): "
                "resume with the same search_space, or start a new experiment "
                "(another experiment_name)"
            ) from None
    # Grid and random trials are pure functions of (seed, number): regenerate
    # their exact parameters, and refuse a space that gives them others.
    params = strategy.ask(record.number)
    if params is None:
        # Beyond this run's n_trials (a resume asking for fewer): kept as recorded, so the
        # result holds every trial the experiment does, as a model-based resume's does.
        try:
            return dict(space.decode(record.params, _stored_form))
        except ValueError:
            return None
    if not same_params(record.params, params):
        raise refuse(
            f"experiment {name!r} recorded trial {record.number} with "
            f"{record.params}, but this search gives it {params}: resume with the "
            "same search_space, strategy and random_state, or start a new experiment"
        )
    return params


def _stored_form(value: Any) -> Any:
    """How the registry keeps a value: JSON (tuples as lists, objects as repr)."""
    from .registry.sql import _dumps, _loads

    return _loads(_dumps(value))


def _check_same_config(
    name: str,
    stored: dict[str, Any],
    current: dict[str, Any],
    same_data: bool = True,
    cv: Any = None,
) -> None:
    """Refuse to resume experiment ``name`` with another estimator, search space, schedule,
    cv folds or scoring.

    The folds are compared when the number of folds and the data are the same (else those
    are named: the data by :meth:`SearchRecorder.open`).
    """
    changed, labels = [], []
    for key, label in _RESUME_FIXED.items():
        if key not in stored:  # recorded before the snapshot held it
            continue
        diffs = _differences(stored[key], current.get(key), label)
        if diffs:
            shown = "; ".join(diffs[:3]) + ("; ..." if len(diffs) > 3 else "")
            changed.append(f"the {label} changed ({shown})")
            labels.append(label)
    if (
        same_data
        and "cv" not in labels
        and _FOLDS in stored
        and stored[_FOLDS] != current.get(_FOLDS)
    ):
        changed.append(_folds_changed(stored, cv))
        labels.append("cv (splitter and random_state)")
    if changed:
        raise InvalidParameterError(
            "resume",
            f"cannot resume experiment {name!r}: {' and '.join(changed)}. Resume with the "
            f"same {' and '.join(labels)} it ran with, or start a new experiment (another "
            "experiment_name)",
        )


def _folds_changed(stored: dict[str, Any], cv: Any) -> str:
    """What a refused resume says of folds that hold other rows than those recorded."""
    folds = stored.get("n_splits")
    was = f"the folds of cv {stored['cv']}" if isinstance(stored.get("cv"), str) else "those"
    text = (
        f"the cv folds changed ({folds} as before, but holding other rows than {was} it ran "
        "with, so new scores would not rank beside the recorded ones"
    )
    if _unseeded_shuffle(cv):
        text += (
            f"; {type(cv).__name__} shuffles without a fixed random_state, so its folds "
            "differ on every run: give it one (an int: the one it ran with, if it had one)"
        )
    return text + ")"


#: What each action on a running experiment would do, its parameter, and its CLI override.
_ACTIONS = {
    "resume": (
        "resume",
        "two drivers would do the same work and register two models",
        "`dmlsearch resume FILE --force`",
    ),
    "overwrite": (
        "overwrite",
        "deleting it under that driver makes its run fail",
        "`dmlsearch run FILE --overwrite --force`",
    ),
    "delete": (
        "experiment",
        "deleting it under that driver makes its run fail",
        "`dmlsearch delete NAME --force`",
    ),
    "delete-python": (
        "experiment",
        "deleting it under that driver makes its run fail",
        "`registry.delete_experiment(name, force=True)`",
    ),
}


def check_not_running(
    store: RegistryStore, existing: ExperimentRecord, action: str = "resume"
) -> None:
    """Refuse to resume, overwrite or delete (``action``) an experiment that another
    driver may still be running.

    A heuristic on what the registry holds (documented in docs/cli.md): a driver records
    its host, process id and start in the experiment's ``config["driver"]``. An experiment
    whose status is ``running`` (a driver runs it, or one was killed before recording its
    end) is refused when that driver's process still lives on this host, or, when it ran
    on another host (or recorded no driver), when a trial was recorded or the driver
    started less than :data:`ACTIVE_SECONDS` ago. ``$DMLSEARCH_FORCE_RESUME`` skips it.
    """
    if existing.status != "running" or os.environ.get(FORCE_RESUME, "") not in ("", "0"):
        return
    param, harm, command = _ACTIONS[action]
    verb = action.split("-")[0]
    driver = existing.config.get("driver")
    driver = driver if isinstance(driver, dict) else {}
    host, pid = driver.get("host"), driver.get("pid")
    force = (
        f"if no driver runs it any more (killed, its machine lost), {verb} it now with "
        f"{command} (or {FORCE_RESUME}=1 in the environment)"
    )
    if host == socket.gethostname() and isinstance(pid, int) and os.name == "posix":
        if pid != os.getpid() and _alive(pid):
            why = f"process {pid} on this host ({host}) runs it"
            raise _running(param, existing.name, why, harm, force)
        return  # its driver on this host is gone (this process, or killed)
    opened = driver.get("opened")
    last = max(
        [
            opened if isinstance(opened, int | float) else existing.created,
            *(t.finished or t.started or 0.0 for t in store.get_trials(existing.id)),
        ]
    )
    age = time.time() - last
    if age < ACTIVE_SECONDS:
        where = f" on {host}" if isinstance(host, str) else ""
        raise _running(
            param,
            existing.name,
            f"its last trial record or driver start{where} is {max(age, 0.0):.0f} s old",
            harm,
            f"{force}, or {verb} again in {ACTIVE_SECONDS - max(age, 0.0):.0f} s, when no "
            f"record younger than {ACTIVE_SECONDS:.0f} s says it is in use",
        )


def _running(param: str, name: str, why: str, harm: str, force: str) -> InvalidParameterError:
    return InvalidParameterError(
        param,
        f"experiment {name!r} is running: {why}, so another driver may still be running it, "
        f"and {harm}. Wait for it to end; {force}",
    )


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this (POSIX) host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    except OSError:
        return False
    return True


def _differences(old: Any, new: Any, path: str) -> list[str]:
    """Where two JSON-like values differ, as ``path: old -> new`` lines."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in [*old, *(k for k in new if k not in old)]:
            if key not in new:
                out.append(f"{path}.{key} removed")
            elif key not in old:
                out.append(f"{path}.{key} added")
            else:
                out.extend(_differences(old[key], new[key], f"{path}.{key}"))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out.extend(_differences(a, b, f"{path}[{i}]"))
        return out
    if old == new or (
        isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new)
    ):
        return []
    return [f"{path}: {_short(old)} -> {_short(new)}"]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
