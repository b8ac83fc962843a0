"""Out-of-fold predictions of search trials (``SearchCV(keep_oof=True)``): where they live.

A trial's worker assembles the trial's out-of-fold predictions from its CV folds (the folds
must partition the rows) and puts them where it can, so they never pile up on the driver:

* ``"artifacts"``: the search has a registry. The worker writes a float32 ``.npy`` to the
  registry's artifact store, at ``<store>/<registry id>/oof/<experiment key>/<trial
  number>.<method>.<sha256>.npy`` (self-describing, so an experiment name is enough to find
  them; read back verified against the sha256 in the name).
* ``"memory"``: no registry. The worker keeps the array in a per-process store keyed by
  ``(run id, trial number)``; the driver reads it back with a task pinned to that worker.

Either way the trial's result carries only an :class:`OofRef`. Worker processes import this
module: no Dask at module level.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import is_classifier

from .exceptions import InvalidParameterError

__all__ = [
    "OofAssembler",
    "OofRef",
    "OofSink",
    "check_partition",
    "response",
]

ARTIFACTS = "artifacts"
MEMORY = "memory"
#: Classifier outputs in the order of preference; regressors always use ``predict``.
METHODS = ("predict_proba", "decision_function", "predict")


@dataclass(frozen=True)
class OofSink:
    """Where a search's workers put out-of-fold predictions; part of its EvalContext.

    ``classes``: the search's classes (``np.unique(y)``) for a classifier, else None.
    ``url`` and ``folder``: the artifact store and the experiment's folder in it.
    """

    backing: str
    run_id: str
    n_samples: int
    classes: np.ndarray | None = None
    url: str | None = None
    folder: str | None = None
    #: The artifact store's fsspec options (the registry's): they travel to the workers
    #: with the sink, and are never shown.
    storage_options: dict[str, Any] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class OofRef:
    """Where one trial's out-of-fold predictions are: small, kept in ``TrialOutcome.oof``.

    ``location``: the artifact store's URL, or the address of the worker holding them.
    ``key``: the file's path in that store, or the search's run id. ``method`` is what
    was stored: ``predict_proba``, ``decision_function``, or ``predict`` (the prediction
    of a regressor; one-hot class votes of a classifier with neither of the others).
    """

    number: int
    method: str
    shape: tuple[int, ...]
    backing: str
    location: str
    key: str
    sha256: str | None = None


def check_partition(splits: Sequence[tuple[np.ndarray, np.ndarray]], n_samples: int) -> None:
    """Refuse folds whose test sets do not hold every row exactly once."""
    counts = np.zeros(n_samples, dtype=np.intp)
    for _, test in splits:
        np.add.at(counts, np.asarray(test, dtype=np.intp), 1)
    if not np.all(counts == 1):
        missing, repeated = int(np.sum(counts == 0)), int(np.sum(counts > 1))
        raise InvalidParameterError(
            "cv",
            f"keep_oof=True needs folds whose test sets hold every row exactly once (KFold, "
            f"StratifiedKFold, GroupKFold, ...); these leave {missing} row(s) out and repeat "
            f"{repeated}; use such a cv, or keep_oof=False",
        )


# -- on the worker ---------------------------------------------------------------------------


def oof_method(estimator: Any) -> str:
    """The output a classifier's out-of-fold predictions are made of."""
    return next(m for m in METHODS if m == "predict" or hasattr(estimator, m))


def one_hot(columns: np.ndarray, n_classes: int) -> np.ndarray:
    out = np.zeros((len(columns), n_classes))
    out[np.arange(len(columns)), columns] = 1.0
    return out


def response(estimator: Any, X: Any, classes: np.ndarray | None) -> tuple[str, np.ndarray]:
    """``(method, values)`` of a fitted estimator on ``X``; a classifier's columns follow
    ``classes`` even when its training rows missed some (as ``cross_val_predict``)."""
    if classes is None:
        return "predict", np.asarray(estimator.predict(X), dtype=np.float64)
    if not is_classifier(estimator):
        # The search's estimator is a classifier (a pipeline whose last step is one), but
        # this trial's parameters made it something else: its votes would be nonsense.
        raise TypeError(
            f"keep_oof: the search's estimator is a classifier but this trial's is not "
            f"({type(estimator).__name__}); keep classifiers and regressors in separate searches"
        )
    method = oof_method(estimator)
    if method == "predict":
        return method, one_hot(np.searchsorted(classes, estimator.predict(X)), len(classes))
    values = np.asarray(getattr(estimator, method)(X), dtype=np.float64)
    own = getattr(estimator, "classes_", classes)
    if len(own) != len(classes):
        if method == "decision_function" and values.ndim == 1:
            raise ValueError(
                f"a fold's training rows hold {len(own)} of the {len(classes)} classes, so "
                "its decision_function has one column, which names no class of the others; "
                "use stratified folds (StratifiedKFold) to keep this trial's predictions"
            )
        from .ensemble._members import order_predictions

        values = order_predictions(np.searchsorted(classes, own), values, len(classes), method)
    return method, values


class OofAssembler:
    """Collects one trial's out-of-fold predictions fold by fold, then stores them."""

    def __init__(self, sink: OofSink) -> None:
        self.sink = sink
        self.method = ""
        self.values: np.ndarray | None = None
        self.error: str | None = None  # why this trial's predictions cannot be kept

    def add(self, estimator: Any, X_test: Any, test: np.ndarray) -> None:
        method, values = response(estimator, X_test, self.sink.classes)
        if self.values is None:
            self.method = method
            self.values = np.zeros((self.sink.n_samples, *values.shape[1:]), dtype=np.float32)
        self.values[test] = values

    def store(self, number: int, worker: str) -> OofRef:
        assert self.values is not None
        if self.sink.backing == ARTIFACTS:
            return _put_file(self.sink, number, self.method, self.values)
        with _LOCK:
            _MEMORY.setdefault(self.sink.run_id, {})[number] = (self.method, self.values)
        return OofRef(number, self.method, self.values.shape, MEMORY, worker, self.sink.run_id)


# Per process: (run id) -> trial number -> (method, values); threads of a worker share it.
_LOCK = threading.Lock()
_MEMORY: dict[str, dict[int, tuple[str, np.ndarray]]] = {}


def fetch_memory(run_id: str, numbers: list[int]) -> dict[int, tuple[str, np.ndarray]]:
    """The predictions this process holds for ``numbers`` of run ``run_id`` (a task)."""
    with _LOCK:
        held = _MEMORY.get(run_id, {})
        return {n: held[n] for n in numbers if n in held}


def drop_memory(run_id: str) -> int:
    """Forget run ``run_id``'s predictions in this process; how many there were."""
    with _LOCK:
        return len(_MEMORY.pop(run_id, {}))


def _store(url: str, folder: str, options: dict[str, Any] | None = None) -> Any:
    from .registry._store_cache import cached_store

    return cached_store(url, folder, options)


def _put_file(sink: OofSink, number: int, method: str, values: np.ndarray) -> OofRef:
    assert sink.url is not None and sink.folder is not None
    buffer = io.BytesIO()
    np.save(buffer, values, allow_pickle=False)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    store = _store(sink.url, sink.folder, sink.storage_options)
    path = f"{store.base}/{number}.{method}.{digest}.npy"
    if not store.fs.exists(path):
        store._write(path, data)  # written aside, then moved: never a partial file
    return OofRef(number, method, values.shape, ARTIFACTS, sink.url, path, digest)


# -- on the driver ---------------------------------------------------------------------------


def memory_sink(search: Any, splits: Sequence[Any], X: Any, y: Any) -> OofSink | None:
    """The sink of ``search`` (SearchCV) if it keeps out-of-fold predictions, checked before
    any work: worker memory; :func:`artifact_sink` moves it to the registry's store."""
    if not isinstance(search.keep_oof, (bool, np.bool_)):
        raise InvalidParameterError("keep_oof", f"must be True or False, got {search.keep_oof!r}")
    if not search.keep_oof:
        return None
    if search.registry is None and search.client is None and _embedded():
        raise InvalidParameterError(
            "keep_oof",
            "with no registry the out-of-fold predictions stay on the workers, and the "
            "cluster that fit starts for itself (client=None, no default client) closes "
            "when fit returns; pass client= (a cluster that outlives fit) or registry= "
            "(they go to its artifact store)",
        )
    from sklearn.base import is_classifier
    from sklearn.utils.validation import _num_samples

    n_samples = _num_samples(X)
    check_partition(splits, n_samples)
    classes = None
    if is_classifier(search.estimator):
        y = np.asarray(y)
        if y.ndim > 1 and y.shape[1] > 1:
            raise InvalidParameterError(
                "keep_oof",
                f"out-of-fold predictions are kept for one target, and y has {y.shape[1]} "
                "columns (a multi-output or multilabel classifier); fit with keep_oof=False",
            )
        classes = np.unique(y)
    return OofSink(MEMORY, uuid.uuid4().hex, n_samples, classes)


def _embedded() -> bool:
    from distributed import Client

    try:
        current = Client.current()
    except ValueError:
        return True
    return current.status != "running"


def experiment_folder(registry: Any, experiment: Any) -> str:
    """An experiment's folder in the registry's artifact store (id and creation time, so a
    reused id of a deleted experiment never finds its files)."""
    key = f"{experiment.id}-{round(experiment.created * 1e6)}"
    return f"{registry.registry_id or '_'}/oof/{key}"


def delete_folder(registry: Any, experiment: Any) -> list[str]:
    """Delete an experiment's out-of-fold files from the registry's artifact store; the
    paths deleted (none if it kept none)."""
    store = _store(
        registry.artifacts.url, experiment_folder(registry, experiment), options_of(registry)
    )
    if not store.fs.exists(store.base):
        return []
    paths = [str(p) for p in store.fs.ls(store.base, detail=False)]
    store.fs.rm(store.base, recursive=True)
    return paths


def artifact_sink(sink: OofSink, registry: Any, experiment_id: int | None) -> OofSink:
    """``sink`` moved to the registry's artifact store, in the experiment's folder."""
    assert experiment_id is not None
    experiment = registry.store.get_experiment(experiment_id)
    moved = OofSink(
        ARTIFACTS,
        sink.run_id,
        sink.n_samples,
        sink.classes,
        url=registry.artifacts.url,
        folder=experiment_folder(registry, experiment),
        storage_options=options_of(registry),
    )
    write_meta(moved)
    return moved


def write_meta(sink: OofSink) -> None:
    """Record what every file of the experiment's folder needs to be read on its own."""
    assert sink.url is not None and sink.folder is not None
    store = _store(sink.url, sink.folder, sink.storage_options)
    meta = {
        "n_samples": sink.n_samples,
        "classes": None if sink.classes is None else np.asarray(sink.classes).tolist(),
    }
    store.fs.makedirs(store.base, exist_ok=True)
    with store.fs.open(f"{store.base}/meta.json", "w") as fh:
        json.dump(meta, fh)


def options_of(registry: Any) -> dict[str, Any] | None:
    """The fsspec options of ``registry``'s artifact store (None without any)."""
    return dict(getattr(registry.artifacts, "storage_options", None) or {}) or None


def read_meta(
    url: str, folder: str, options: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    store = _store(url, folder, options)
    try:
        with store.fs.open(f"{store.base}/meta.json", "r") as fh:
            meta: dict[str, Any] = json.load(fh)
    except FileNotFoundError:
        return None
    return meta


def list_files(url: str, folder: str, options: dict[str, Any] | None = None) -> dict[int, OofRef]:
    """The predictions stored in an experiment's folder, by trial number."""
    store = _store(url, folder, options)
    if not store.fs.exists(store.base):
        return {}
    out: dict[int, OofRef] = {}
    for path in sorted(store.fs.ls(store.base, detail=False)):
        parts = str(path).rsplit("/", 1)[-1].split(".")
        if len(parts) != 4 or parts[3] != "npy" or not parts[0].isdigit():
            continue
        number = int(parts[0])
        out[number] = OofRef(number, parts[1], (), ARTIFACTS, url, str(path), parts[2])
    return out


def _read_file(ref: OofRef, options: dict[str, Any] | None) -> np.ndarray:
    from .registry.artifacts import ArtifactIntegrityError

    store = _store(ref.location, "", options)
    try:
        with store.fs.open(ref.key, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise ArtifactIntegrityError(
            f"the out-of-fold predictions of trial {ref.number} are missing: no file at "
            f"{store.show(ref.key)}"
        ) from None
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise ArtifactIntegrityError(
            f"the out-of-fold predictions of trial {ref.number} at {store.show(ref.key)} "
            "are corrupt (their bytes do not match the sha256 in their name)"
        )
    return np.asarray(np.load(io.BytesIO(data), allow_pickle=False))


def load(
    refs: Sequence[OofRef], client: Any, options: dict[str, Any] | None = None
) -> tuple[dict[int, tuple[str, np.ndarray]], list[int]]:
    """The predictions ``refs`` point at, by trial number, and the numbers found nowhere
    (kept in the memory of a worker that has left, or restarted). ``options``: the fsspec
    options of the artifact store that holds the files among them."""
    found: dict[int, tuple[str, np.ndarray]] = {}
    by_worker: dict[tuple[str, str], list[int]] = {}
    for ref in refs:
        if ref.backing == ARTIFACTS:
            found[ref.number] = (ref.method, _read_file(ref, options))
        else:
            by_worker.setdefault((ref.location, ref.key), []).append(ref.number)
    if by_worker:
        found.update(_load_memory(by_worker, client))
    return found, [r.number for r in refs if r.number not in found]


def _load_memory(
    by_worker: dict[tuple[str, str], list[int]], client: Any
) -> dict[int, tuple[str, np.ndarray]]:
    from distributed import wait

    from .runner.gang import alive_workers

    alive = set(alive_workers(client, running=False)) if client is not None else set()
    futures = []
    out: dict[int, tuple[str, np.ndarray]] = {}
    for (worker, run_id), numbers in by_worker.items():
        if worker not in alive:  # not run on a worker (a local test), or the worker left
            out.update(fetch_memory(run_id, numbers))
            continue
        futures.append(
            client.submit(
                fetch_memory,
                run_id,
                numbers,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
        )
    if futures:
        # A worker leaving now would leave its task waiting: bounded, then counted as lost.
        try:
            with client.as_current():
                wait(futures, timeout=60)
        except TimeoutError:
            pass
        for future in futures:
            if future.status == "finished":
                out.update(future.result())
        for future in futures:
            future.release()
    return out


def release(refs: Sequence[OofRef], client: Any) -> int:
    """Forget the worker-memory predictions of the runs ``refs`` belong to; how many."""
    runs = {r.key for r in refs if r.backing == MEMORY}
    total = 0
    for run_id in runs:
        total += drop_memory(run_id)
        if client is not None:
            total += sum(client.run(drop_memory, run_id).values())
    return total


def for_search(search: Any, trial: int) -> np.ndarray:
    """``SearchCV.oof_predictions`` (the reading side lives with ensemble selection)."""
    from .ensemble._selection_source import trial_predictions

    return trial_predictions(search, trial)
