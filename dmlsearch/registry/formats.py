"""Model serialisation in native, non-executable formats; pickle only on request.

* scikit-learn estimators (Pipelines included): skops. The types skops does not trust by
  default are listed at registration and kept in the registry database, not in the
  artifact, so a swapped artifact cannot widen what a load trusts.
* xgboost: its own UBJ format (a Booster, or the scikit-learn wrapper with its class).
* torch modules: the ``state_dict``, loaded back with ``weights_only=True``.
* skorch nets (``TorchClassifier``, ``TorchRegressor``): the module's ``state_dict`` and
  class labels, plain parameters in the metadata (see ``_skorch``).
* anything else: pickle, only with ``allow_pickle=True`` (pickle runs code on load).
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import DmlsearchError
from ._skorch import SKORCH_NET, dump_net, is_plain, is_skorch_net, load_net

__all__ = ["FormatError", "Serialized", "dump_model", "load_model"]

SKOPS = "skops"
XGBOOST_UBJ = "xgboost-ubj"
TORCH_STATE_DICT = "torch-state-dict"
PICKLE = "pickle"


class FormatError(DmlsearchError):
    """A model cannot be saved or loaded safely in the requested way."""


@dataclass(frozen=True)
class Serialized:
    """A model as bytes, with what is needed to load it back."""

    data: bytes
    format: str
    trusted_types: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def _class_path(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_class(path: str) -> Any:
    module, _, name = path.partition(":")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


def _is_torch_module(model: Any) -> bool:
    # Only a model built with torch can be a torch module: never import torch to find out.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _xgb_kind(model: Any) -> str | None:
    if not type(model).__module__.startswith("xgboost"):
        return None
    import xgboost

    if isinstance(model, xgboost.Booster):
        return "booster"
    if isinstance(model, xgboost.XGBModel):
        return "sklearn"
    return None


def dump_model(model: Any, *, allow_pickle: bool = False) -> Serialized:
    """Serialise ``model`` in the safest format that fits it."""
    kind = _xgb_kind(model)
    if kind == "booster":
        return Serialized(bytes(model.save_raw(raw_format="ubj")), XGBOOST_UBJ, meta={"kind": kind})
    if kind == "sklearn":
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.ubj")
            model.save_model(path)
            with open(path, "rb") as fh:
                data = fh.read()
        meta = {"kind": kind, "class": _class_path(model), **_xgb_params(model)}
        return Serialized(data, XGBOOST_UBJ, meta=meta)
    if is_skorch_net(model):
        data, meta = dump_net(model)
        return Serialized(data, SKORCH_NET, meta=meta)
    if _is_torch_module(model):
        import torch

        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        return Serialized(buffer.getvalue(), TORCH_STATE_DICT, meta={"class": _class_path(model)})
    if hasattr(model, "get_params") and hasattr(model, "fit"):
        return _dump_skops(model, allow_pickle)
    if allow_pickle:
        return _pickled(model)
    raise FormatError(
        f"no safe format for {type(model).__name__}: dmlsearch saves scikit-learn estimators "
        "(skops), xgboost models and torch modules; pass allow_pickle=True to pickle it"
    )


def _xgb_params(model: Any) -> dict[str, Any]:
    """The metadata that gives a loaded xgboost estimator its hyperparameters back: xgboost's
    own file keeps the trees but not ``n_estimators``, ``max_depth``, ..., so a loaded model
    would otherwise refit with xgboost's defaults. ``params`` are the plain ones;
    ``unsaved_params`` names those set to something that is not plain data (a callable
    objective or metric, callbacks)."""
    defaults = type(model)().get_params(deep=False)
    params: dict[str, Any] = {}
    unsaved = []
    for name, value in model.get_params(deep=False).items():
        if is_plain(value):
            params[name] = value
        elif not _same(value, defaults.get(name)):
            unsaved.append(name)
    return {"params": params, "unsaved_params": unsaved} if unsaved else {"params": params}


def _same(value: Any, default: Any) -> bool:
    """Whether a parameter holds its default (NaN, ``missing``'s default, included)."""
    if value is default:
        return True
    if isinstance(value, float) and isinstance(default, float):
        return value == default or (value != value and default != default)
    try:
        return bool(value == default)
    except Exception:  # arrays and other objects without a plain truth value
        return False


def _load_xgb_estimator(serialized: Serialized) -> Any:
    import xgboost

    cls = _import_class(serialized.meta["class"])
    if not (isinstance(cls, type) and issubclass(cls, xgboost.XGBModel)):
        raise FormatError(f"{serialized.meta['class']} is not an xgboost model class")
    model = cls().set_params(**serialized.meta.get("params", {}))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.ubj")
        with open(path, "wb") as fh:
            fh.write(serialized.data)
        model.load_model(path)
    unsaved = serialized.meta.get("unsaved_params")
    if unsaved:
        warnings.warn(
            f"this {cls.__name__} was registered with parameters that are not plain data "
            f"({', '.join(unsaved)}): it predicts as registered, but those parameters are "
            "xgboost's defaults now; set them again before refitting it",
            UserWarning,
            stacklevel=3,
        )
    return model


def _dump_skops(model: Any, allow_pickle: bool) -> Serialized:
    """skops bytes that load back (checked here, as :func:`load_model` loads them)."""
    import skops.io as sio

    from ._skorch import nested_net

    name = type(model).__name__
    net = nested_net(model)
    if net is not None:  # skops dumps it, then fails to load it with an internal error
        if allow_pickle:
            return _pickled(model)
        raise _refused(
            model,
            f"{name} holds a torch net ({net}): skops cannot load a fitted net back, and "
            "the skorch-net format holds a net alone",
        )
    try:
        data = sio.dumps(model)
    except Exception as exc:  # skops refuses some objects: say which way out
        if allow_pickle:
            return _pickled(model)
        raise _refused(model, f"skops cannot serialise {name} ({exc})") from exc
    serialized = Serialized(data, SKOPS, trusted_types=list(sio.get_untrusted_types(data=data)))
    try:
        # skops saves functions by name: a lambda or a nested function dumps, then never loads.
        load_model(serialized)
    except FormatError as exc:
        if allow_pickle:
            return _pickled(model)
        reason = f"{name} was saved by skops but cannot be loaded back ({exc.__cause__ or exc})"
        raise _refused(model, reason) from exc
    local = sorted(t for t in serialized.trusted_types if t.startswith("__main__."))
    if local:
        # It loads back here, where __main__ defines them; nowhere else.
        warnings.warn(
            f"{name} uses types defined in the running script or notebook ({', '.join(local)}):"
            " this version loads only in a process that defines them the same way; move them "
            "to an importable module to load it elsewhere (a worker, another script, the CLI)",
            UserWarning,
            stacklevel=4,
        )
    return serialized


#: What to change in a model that no format can save.
_UNSAVABLE = (
    "lambdas, functions defined inside other functions, generators and open files cannot "
    "be saved: use a named function defined at module level (e.g. in FunctionTransformer) "
    "and keep such objects out of the fitted model"
)


def _refused(model: Any, reason: str) -> FormatError:
    """The error for a model skops cannot save; it offers pickle only where pickle can."""
    try:
        pickle.dumps(model)
    except Exception as exc:  # any pickling failure: the advice is to change the model
        return FormatError(f"{reason}, and pickle cannot save it either ({exc}); {_UNSAVABLE}")
    return FormatError(
        f"{reason}; pass allow_pickle=True if you trust everyone who can write the artifact store"
    )


def _pickled(model: Any) -> Serialized:
    try:
        return Serialized(pickle.dumps(model), PICKLE)
    except Exception as exc:  # PicklingError, TypeError, AttributeError, ... by object
        raise FormatError(
            f"pickle cannot save {type(model).__name__} ({exc}); {_UNSAVABLE}"
        ) from exc


def load_model(serialized: Serialized, *, allow_pickle: bool = False, module: Any = None) -> Any:
    """Load what :func:`dump_model` wrote; ``module`` receives a torch ``state_dict`` (a
    module) or a skorch net's weights (an unfitted net of the registered class)."""
    fmt = serialized.format
    if fmt == SKOPS:
        import skops.io as sio

        try:
            return sio.loads(serialized.data, trusted=list(serialized.trusted_types))
        except Exception as exc:  # surface skops' refusal as ours
            raise FormatError(f"skops refused to load the model: {exc}") from exc
    if fmt == XGBOOST_UBJ:
        import xgboost

        if serialized.meta.get("kind") == "booster":
            booster = xgboost.Booster()
            booster.load_model(bytearray(serialized.data))
            return booster
        return _load_xgb_estimator(serialized)
    if fmt == TORCH_STATE_DICT:
        import torch

        state = torch.load(io.BytesIO(serialized.data), weights_only=True)
        if module is None:
            return state
        module.load_state_dict(state)
        return module
    if fmt == SKORCH_NET:
        return load_net(serialized.data, serialized.meta, module)
    if fmt == PICKLE:
        if not allow_pickle:
            raise FormatError(
                "this model was saved with pickle, which runs code on load; pass "
                "allow_pickle=True only if you trust whoever could write the artifact store"
            )
        return pickle.loads(serialized.data)  # the caller explicitly allowed pickle
    raise FormatError(f"unknown model format {fmt!r}")
