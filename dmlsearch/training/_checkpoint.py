"""Checkpoints of a training job: a model's and optimizer's state as bytes, with their sha256."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch
from distributed import Client, Variable

from ..exceptions import TrainingError
from ..registry.artifacts import ArtifactIntegrityError

__all__ = ["Checkpoint", "CheckpointInbox", "Start", "state_bytes", "state_from_bytes"]

logger = logging.getLogger("dmlsearch")


def _on_cpu(value: Any) -> Any:
    """``value`` (a state dict, nested) with every tensor copied to host memory."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        out = type(value)((k, _on_cpu(v)) for k, v in value.items())
        if hasattr(
            value, "_metadata"
        ):  # a state_dict's module versions: load_state_dict reads them
            out._metadata = value._metadata  # type: ignore[attr-defined]
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


def state_bytes(
    epoch: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | dict[str, Any] | None = None,
) -> bytes:
    """``torch.save`` of ``{"epoch", "model", "optimizer"}`` (state dicts: tensors and numbers;
    ``optimizer``: an optimizer or its ``state_dict()``).

    Tensors are saved from host memory whatever device the model is on, so that a driver
    (or a registry's reader) without a GPU loads them.
    """
    buf = io.BytesIO()
    state = {
        "epoch": epoch,
        "model": _on_cpu(model.state_dict()),
        "optimizer": None if optimizer is None else _on_cpu(_state_of(optimizer)),
    }
    torch.save(state, buf)
    return buf.getvalue()


def _state_of(optimizer: torch.optim.Optimizer | dict[str, Any]) -> dict[str, Any]:
    return optimizer if isinstance(optimizer, dict) else optimizer.state_dict()


def state_from_bytes(data: bytes) -> dict[str, Any]:
    """The state :func:`state_bytes` wrote, loaded with ``weights_only=True`` (no pickle code),
    on CPU."""
    state: dict[str, Any] = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    return state


@dataclass(frozen=True)
class Start:
    """Where a job starts: the state's bytes, the epochs already run and their figures."""

    state: bytes
    epoch: int = 0
    history: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Checkpoint:
    """The state after ``epoch`` epochs.

    ``uri`` is where the registry's artifact store keeps it (then ``data`` is None); without
    a registry the bytes stay on the driver in ``data``. ``sha256`` is checked on every load.
    ``history`` holds the epochs' figures up to this one (as ``history_``).
    """

    epoch: int
    sha256: str
    uri: str | None = None
    data: bytes | None = field(default=None, repr=False)
    history: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    def bytes(self, registry: Any = None) -> bytes:
        """The checkpoint's bytes, checked against its sha256."""
        if self.data is not None:
            actual = hashlib.sha256(self.data).hexdigest()
            if actual != self.sha256:
                raise ArtifactIntegrityError(
                    f"checkpoint of epoch {self.epoch} hashes to {actual}, not {self.sha256}"
                )
            return self.data
        if registry is None:
            raise ValueError(
                f"checkpoint of epoch {self.epoch} is in a registry's artifact store ({self.uri}): "
                "pass registry= to load it"
            )
        data: bytes = registry.artifacts.get(
            self.sha256, what=f"(checkpoint of epoch {self.epoch})"
        )
        return data

    def load(self, registry: Any = None) -> dict[str, Any]:
        """``{"epoch", "model", "optimizer"}``; ``registry``: the one that stores it (by uri)."""
        return state_from_bytes(self.bytes(registry))


class CheckpointInbox:
    """On the driver: the checkpoints rank 0 publishes in a Dask Variable (the latest only).

    :meth:`poll` turns a new one into a :class:`Checkpoint` (stored in the registry's
    artifact store when there is a registry) and hands it to ``keep``. ``history`` is the
    figures of the epochs run before this job (a resumed job's), put before its own.
    """

    def __init__(
        self, client: Client, registry: Any, keep: Any, history: list[dict[str, Any]]
    ) -> None:
        self.variable = Variable(f"dmlsearch-checkpoint-{uuid.uuid4().hex}", client=client)
        self.variable.set(None)
        self.registry = registry
        self.keep = keep
        self.history = history
        self.epoch = -1

    @property
    def name(self) -> str:
        return str(self.variable.name)

    def poll(self) -> None:
        value = self.variable.get(timeout=10)
        if not value or value["epoch"] <= self.epoch:
            return
        data, epoch = value["data"], int(value["epoch"])
        digest = hashlib.sha256(data).hexdigest()
        if digest != value["sha256"]:
            raise TrainingError(f"the checkpoint of epoch {epoch} was altered on its way")
        self.store(epoch, data, value["history"])

    def store(self, epoch: int, data: bytes, history: list[dict[str, Any]]) -> None:
        """Keep ``data`` as the checkpoint of ``epoch`` (``history``: this job's epochs)."""
        digest = hashlib.sha256(data).hexdigest()
        figures = tuple(self.history) + tuple(dict(h) for h in history)
        if self.registry is not None:
            uri, digest = self.registry.artifacts.put(data)
            checkpoint = Checkpoint(epoch, digest, uri, history=figures)
        else:
            checkpoint = Checkpoint(epoch, digest, None, data, history=figures)
        self.epoch = epoch
        self.keep(checkpoint)
        logger.info("dmlsearch: checkpoint of epoch %d (%s)", epoch, digest[:12])

    def delete(self) -> None:
        with contextlib.suppress(Exception):  # a closed client: the scheduler went with it
            self.variable.delete()
