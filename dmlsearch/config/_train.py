"""The ``train:`` section: a data-parallel PyTorch training job instead of a search.

Validating the section imports torch (and builds the model once, to try the optimizer on
its parameters); a file without it never does. The model, loss and optimizer are kept as
picklable callables for :class:`~dmlsearch.training.DataParallelTrainer`.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import StrictBool, ValidationInfo, field_validator, model_validator

from ._common import Loc, _err, _Problems, _short, _suggest, check_model_name
from ._data_model import NonNegInt, PosInt, Seconds, _check_kwargs, _Section
from ._imports import _base_dir, _import, _ImportFailed

__all__ = ["SYNC_NAMES", "TrainSection"]

#: ``dmlsearch.training.SYNCS``, not imported from there: that imports torch.
SYNC_NAMES = ("allreduce", "average", "ssp")


class _Call:
    """``func(*args, **kwargs)``: the model, loss or optimizer an experiment file names.

    A function (or class) from a module beside the experiment file is pickled by value
    (cloudpickle), so that the ranks' workers need not have that folder on their path.
    """

    def __init__(self, func: Any, kwargs: dict[str, Any], by_value: bool = False) -> None:
        self.func = func
        self.kwargs = kwargs
        self.by_value = by_value

    def __call__(self, *args: Any) -> Any:
        return self.func(*args, **self.kwargs)

    def __repr__(self) -> str:
        name = getattr(self.func, "__qualname__", repr(self.func))
        return f"{getattr(self.func, '__module__', '?')}:{name}(**{self.kwargs!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        module = sys.modules.get(getattr(self.func, "__module__", ""))
        if not self.by_value or module is None:
            return (_Call, (self.func, self.kwargs))
        import cloudpickle  # type: ignore[import-untyped]

        cloudpickle.register_pickle_by_value(module)
        try:
            data = cloudpickle.dumps((self.func, self.kwargs))
        finally:
            cloudpickle.unregister_pickle_by_value(module)
        return (_loads, (data,))


def _loads(data: bytes) -> _Call:
    import cloudpickle

    func, kwargs = cloudpickle.loads(data)
    return _Call(func, kwargs)


def _beside(func: Any, base_dir: Path | None) -> bool:
    """Whether ``func`` comes from a top-level module in the experiment file's folder."""
    module = sys.modules.get(getattr(func, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    if base_dir is None or module is None or not file or "." in module.__name__:
        return False
    return Path(file).resolve().parent == base_dir.resolve()


# -- reading the model, loss and optimizer (locations relative to the field) --------------


@dataclass(frozen=True)
class _Built:
    """A model, loss or optimizer as written (``spec``), its callable, and (for the model)
    the module it built while validating."""

    spec: Any
    call: _Call
    module: Any = None


def _function_spec(value: Any, problems: _Problems) -> tuple[Any, dict[str, Any], Loc, Loc]:
    """``path`` or ``{function: path, kwargs: {...}}``: (path, kwargs, where the path is,
    where the kwargs are)."""
    if isinstance(value, str):
        return value, {}, (), ()
    if not isinstance(value, dict) or "function" not in value:
        problems.add(
            (), "expected an import path (module:function) or {function: ..., kwargs: {...}}"
        )
        return None, {}, (), ()
    for key in value:
        if key not in ("function", "kwargs"):
            problems.add((str(key),), f"unknown key {key!r}; the keys are function, kwargs")
    kwargs = value.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        problems.add(("kwargs",), f"expected a mapping of name: value, got {_short(kwargs)}")
        kwargs = {}
    return value["function"], kwargs, ("function",), ("kwargs",)


def _optimizer_spec(value: Any, problems: _Problems) -> tuple[Any, dict[str, Any], Loc, Loc]:
    """``Name``, ``{class: Name, lr: ...}`` or ``{class: Name, params: {lr: ...}}``:
    (path, kwargs, where the path is, where the kwargs are)."""
    if isinstance(value, str):
        return value, {}, (), ()
    if not isinstance(value, dict) or "class" not in value:
        problems.add((), "expected an optimizer: SGD, or {class: SGD, lr: 0.1, ...}")
        return None, {}, (), ()
    rest = {k: v for k, v in value.items() if k not in ("class", "params")}
    if "params" not in value:
        return value["class"], rest, ("class",), ()
    params = value["params"]
    if not isinstance(params, dict) or rest:
        problems.add(
            ("params",),
            "give the optimizer's arguments beside class ({class: SGD, lr: 0.1}) or as a "
            "mapping under params, not both",
        )
        return None, {}, (), ()
    return value["class"], params, ("class",), ("params",)


def _members(namespace: str, keep: Any) -> list[str]:
    module = importlib.import_module(namespace)
    return [n for n in dir(module) if not n.startswith("_") and keep(getattr(module, n))]


def _resolve(
    path: Any,
    loc: Loc,
    problems: _Problems,
    base_dir: Path | None,
    namespace: str | None = None,
    keep: Any = callable,
) -> Any:
    """An import path, or a bare name looked up in ``namespace`` (torch.optim, F)."""
    if not isinstance(path, str) or not path.strip():
        problems.add(loc, f"expected a name or an import path, got {_short(path)}", path)
        return None
    if "." not in path and ":" not in path:
        if namespace is None:
            problems.add(
                loc,
                f"expected an import path module:function (e.g. models:{path} for a function "
                f"{path} in models.py beside this file), got {path!r}",
                path,
            )
            return None
        names = _members(namespace, keep)
        if path not in names:
            problems.add(
                loc,
                f"{namespace} has no {path!r}{_suggest(path, names)}; or write an import path "
                "(module:name)",
                path,
            )
            return None
        return getattr(importlib.import_module(namespace), path)
    try:
        return _import(path, base_dir)
    except _ImportFailed as exc:
        problems.add(loc, str(exc), path)
        return None


def _made(func: Any, loc: Loc, problems: _Problems, *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except Exception as exc:
        name = getattr(func, "__name__", repr(func))
        problems.add(loc, f"{name}(...) failed: {type(exc).__name__}: {exc}")
        return None


def _model(value: Any, problems: _Problems, base_dir: Path | None) -> _Built | None:
    import torch

    path, kwargs, loc, where = _function_spec(value, problems)
    func = None if path is None else _resolve(path, loc, problems, base_dir)
    if func is None:
        return None
    if not callable(func):
        problems.add(loc, f"{path} is not a function returning a torch.nn.Module", path)
        return None
    _check_kwargs(func, kwargs, problems, where=where)
    if problems:
        return None
    with torch.random.fork_rng(devices=[]):
        module = _made(func, loc, problems, **kwargs)
    if module is not None and not isinstance(module, torch.nn.Module):
        problems.add(loc, f"{path} must return a torch.nn.Module, returned {type(module).__name__}")
    if problems:
        return None
    return _Built(value, _Call(func, kwargs, _beside(func, base_dir)), module)


def _loss(value: Any, problems: _Problems, base_dir: Path | None) -> _Built | None:
    path, kwargs, loc, where = _function_spec(value, problems)
    func = None if path is None else _resolve(path, loc, problems, base_dir, "torch.nn.functional")
    if func is None:
        return None
    if inspect.isclass(func):  # a loss module such as torch.nn.CrossEntropyLoss
        _check_kwargs(func, kwargs, problems, where=where)
        instance = None if problems else _made(func, loc, problems, **kwargs)
        return None if instance is None else _Built(value, _Call(instance, {}))
    if not callable(func):
        problems.add(loc, f"{path} is not a loss function", path)
        return None
    _check_kwargs(func, kwargs, problems, where=where, args=(None, None))
    if problems:
        return None
    return _Built(value, _Call(func, kwargs, _beside(func, base_dir)))


def _optimizer(value: Any, problems: _Problems, base_dir: Path | None, model: Any) -> _Built | None:
    import torch

    path, kwargs, loc, where = _optimizer_spec(value, problems)
    if path is None:
        return None

    def is_optimizer(obj: Any) -> bool:
        return inspect.isclass(obj) and issubclass(obj, torch.optim.Optimizer)

    cls = _resolve(path, loc, problems, base_dir, "torch.optim", is_optimizer)
    if cls is None:
        return None
    if not callable(cls) or (inspect.isclass(cls) and not is_optimizer(cls)):
        problems.add(loc, f"{path} is not a torch.optim.Optimizer class", path)
        return None
    _check_kwargs(cls, kwargs, problems, where=where, args=(None,))
    if problems or not isinstance(model, _Built):
        return None  # without a model, nothing to try the optimizer on
    optimizer = _made(cls, (), problems, model.module.parameters(), **kwargs)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        problems.add(loc, f"{path} does not make a torch.optim.Optimizer", path)
    if problems:
        return None
    return _Built(value, _Call(cls, kwargs, _beside(cls, base_dir)))


def _spec_name(built: Any, key: str) -> str:
    spec = built.spec if isinstance(built, _Built) else built
    return str(spec.get(key) if isinstance(spec, dict) else spec)


# -- the section ---------------------------------------------------------------------------


class TrainSection(_Section):
    """``DataParallelTrainer(model_fn, loss_fn, optimizer_fn, epochs=..., ...)`` on ``data``.

    ``model``: ``module:function`` (or ``{function, kwargs}``) returning a
    ``torch.nn.Module``; ``loss``: a ``torch.nn.functional`` name or an import path;
    ``optimizer``: a ``torch.optim`` class name or an import path, with its arguments.
    Validated, the three hold what they build (see :meth:`trainer_kwargs`).
    """

    model: Any
    loss: Any
    optimizer: Any
    epochs: PosInt = 1
    batch_size: PosInt = 32
    sync: Literal["allreduce", "average", "ssp"] = "allreduce"
    average_every: PosInt = 1
    staleness: NonNegInt | None = None
    n_workers: PosInt = 2
    shuffle: StrictBool = True
    random_state: NonNegInt | None = None
    checkpoint_every: PosInt | None = 1
    elastic: StrictBool = False
    timeout: Seconds = 60.0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    model_name: str | None = None

    @field_validator("model", "loss", "optimizer", mode="after")
    @classmethod
    def _build(cls, value: Any, info: ValidationInfo) -> Any:
        problems = _Problems()
        base_dir = _base_dir(info)
        if info.field_name == "model":
            built = _model(value, problems, base_dir)
        elif info.field_name == "loss":
            built = _loss(value, problems, base_dir)
        else:  # tried on the model's parameters, when the model was built
            built = _optimizer(value, problems, base_dir, info.data.get("model"))
        problems.raise_if_any(str(info.field_name))
        return built

    @field_validator("sync", mode="before")
    @classmethod
    def _sync(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in SYNC_NAMES:
            raise _err(
                f"unknown sync {value!r}; choose one of {', '.join(SYNC_NAMES)}"
                f"{_suggest(value, SYNC_NAMES)}"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> TrainSection:
        problems = _Problems()
        if self.staleness is not None and self.sync != "ssp":
            problems.add(("staleness",), "only used with sync: ssp")
        if "average_every" in self.model_fields_set and self.sync != "average":
            problems.add(("average_every",), "only used with sync: average")
        if self.model_name is not None and not self.model_name.strip():
            problems.add(("model_name",), "expected a non-empty model name")
        else:
            check_model_name(problems, ("model_name",), self.model_name)
        problems.raise_if_any("TrainSection")
        return self

    def trainer_kwargs(self) -> dict[str, Any]:
        """The ``DataParallelTrainer`` arguments this section stands for (not the client,
        registry or names)."""
        return {
            "model_fn": self.model.call,
            "loss_fn": self.loss.call,
            "optimizer_fn": self.optimizer.call,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "sync": self.sync,
            "average_every": self.average_every,
            "staleness": self.staleness,
            "n_workers": self.n_workers,
            "shuffle": self.shuffle,
            "random_state": self.random_state,
            "checkpoint_every": self.checkpoint_every,
            "elastic": self.elastic,
            "timeout": self.timeout,
            "device": self.device,
            "backend": self.backend,
        }

    def outline(self) -> dict[str, Any]:
        """The model, loss and optimizer as written (import paths or names)."""
        return {
            "model": _spec_name(self.model, "function"),
            "loss": _spec_name(self.loss, "function"),
            "optimizer": _spec_name(self.optimizer, "class"),
        }
