"""A fitted skorch net (``TorchClassifier``, ``TorchRegressor``, any ``NeuralNet``) as
weights plus plain parameters: no pickle, loaded back with ``weights_only=True``.

The artifact holds the module's ``state_dict`` and the class labels; the net's parameters
and fitted attributes that are plain data (numbers, strings, lists of them) go in the
version's metadata. The
module class itself is code, so a load needs an unfitted net to pour them into, as a
``torch-state-dict`` load needs a module: ``load_model(name, module=TorchClassifier(MyNet))``.
"""

from __future__ import annotations

import io
import json
import sys
import warnings
from typing import Any

__all__ = ["SKORCH_NET", "dump_net", "is_skorch_net", "load_net", "nested_net"]

SKORCH_NET = "skorch-net"


def is_skorch_net(model: Any) -> bool:
    # Only a model built with skorch can be a skorch net: never import skorch to find out.
    skorch = sys.modules.get("skorch")
    return skorch is not None and isinstance(model, skorch.NeuralNet)


def nested_net(model: Any) -> str | None:
    """The parameter name of a skorch net inside ``model`` (a Pipeline step, a
    meta-estimator's estimator), or None. Such a model has no safe format: skops cannot
    load a fitted net back, and the net's own format holds a net alone."""
    if is_skorch_net(model) or not hasattr(model, "get_params"):
        return None
    try:
        params = model.get_params(deep=True)
    except Exception:  # a broken get_params: registration says what is wrong
        return None
    return next((name for name, value in params.items() if is_skorch_net(value)), None)


def is_plain(value: Any) -> bool:
    """Whether ``value`` is plain JSON data that metadata can hold (no NaN, no objects)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _class_path(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _describe(value: Any) -> Any:
    """A parameter as metadata can compare it: plain data as it is, a class or function
    by its import path, an object by its class's (its state is not compared)."""
    if isinstance(value, list | tuple):
        return [_describe(v) for v in value]
    if is_plain(value):
        return value
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return f"{getattr(value, '__module__', '?')}:{value.__qualname__}"
    return f"an instance of {_class_path(value)}"


def _unplain_mismatches(stored: dict[str, Any], net: Any) -> list[str]:
    """The parameters that are not plain data whose value in ``net`` differs from the one
    described at registration (they cannot be stored; ``net`` must bring them)."""
    given = net.get_params(deep=False)
    wrong = []
    for name, described in stored.items():
        now = _describe(given[name]) if name in given else "not set"
        if now != described:
            wrong.append(f"{name} was {described} when registered; the net passed has {now}")
    return wrong


def dump_net(net: Any) -> tuple[bytes, dict[str, Any]]:
    """``(artifact bytes, metadata)`` of a fitted net; FormatError if it is not fitted."""
    import torch

    from .formats import FormatError

    if not getattr(net, "initialized_", False):
        raise FormatError(f"{type(net).__name__} is not fitted: nothing to register")
    classes = net.__dict__.get("classes_inferred_")
    payload = {
        "module": net.module_.state_dict(),
        "classes": None if classes is None else list(getattr(classes, "tolist", lambda: classes)()),
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    every = net.get_params(deep=False)
    params = {k: v for k, v in every.items() if is_plain(v)}
    # Classes, functions and objects cannot be stored safely: the loading net brings them,
    # and their description says when it brings other ones (an activation class searched
    # as module__act, a criterion).
    objects = {k: _describe(v) for k, v in every.items() if not is_plain(v)}
    # Fitted attributes that are plain data (a regressor's target shape, the seed).
    fitted = {
        k: v
        for k, v in vars(net).items()
        if k.endswith("_") and not k.startswith("_") and k != "initialized_" and is_plain(v)
    }
    meta = {"class": _class_path(net), "params": params, "fitted": fitted, "objects": objects}
    return buffer.getvalue(), meta


def load_net(data: bytes, meta: dict[str, Any], net: Any) -> Any:
    """A fitted copy of the unfitted ``net``, with the stored parameters and weights."""
    import torch
    from sklearn.base import clone

    from .formats import FormatError

    if not is_skorch_net(net):
        raise FormatError(
            f"this version is a skorch net ({meta.get('class')}); pass module= an unfitted "
            "net of that class to load its weights into, e.g. "
            "load_model(name, module=TorchClassifier(MyNet))"
        )
    if _class_path(net) != meta.get("class"):
        raise FormatError(
            f"this version is a {meta.get('class')}, not a {_class_path(net)}: pass module= "
            "a net of the class that was registered"
        )
    try:
        payload = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # a swapped or damaged artifact: say so, as other formats do
        raise FormatError(f"the net's weights could not be read: {exc}") from exc
    fitted = clone(net).set_params(**meta.get("params", {}))
    wrong = _unplain_mismatches(meta.get("objects", {}), fitted)
    if wrong:
        warnings.warn(
            "the net passed as module= differs from the registered one in what the registry "
            f"cannot store: {'; '.join(wrong)}. The weights are loaded into the net passed; "
            "set those parameters on it (e.g. TorchClassifier(MyNet, module__act=torch.nn."
            "Tanh)) to load the registered model",
            UserWarning,
            stacklevel=3,
        )
    fitted.initialize()
    try:
        fitted.module_.load_state_dict(payload["module"])
    except RuntimeError as exc:
        raise FormatError(
            f"the stored weights do not fit the module of the net passed as module= ({exc}); "
            "pass the module class (and module__ arguments) that was registered"
        ) from exc
    for key, value in meta.get("fitted", {}).items():
        setattr(fitted, key, value)
    if payload.get("classes") is not None:
        import numpy as np

        fitted.classes_inferred_ = np.asarray(payload["classes"])
    return fitted
