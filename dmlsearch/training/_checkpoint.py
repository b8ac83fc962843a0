"""Checkpoints of a training job: a model's and optimizer's state as bytes, with their sha256."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from typing import Any

import torch

from ..registry.artifacts import ArtifactIntegrityError

__all__ = ["Checkpoint", "state_bytes", "state_from_bytes"]


def state_bytes(
    epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> bytes:
    """``torch.save`` of ``{"epoch", "model", "optimizer"}`` (state dicts: tensors and numbers)."""
    buf = io.BytesIO()
    state = {
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
    }
    torch.save(state, buf)
    return buf.getvalue()


def state_from_bytes(data: bytes) -> dict[str, Any]:
    """The state :func:`state_bytes` wrote, loaded with ``weights_only=True`` (no pickle code)."""
    state: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=True)
    return state


@dataclass(frozen=True)
class Checkpoint:
    """The state after ``epoch`` epochs.

    ``uri`` is where the registry's artifact store keeps it (then ``data`` is None); without
    a registry the bytes stay on the driver in ``data``. ``sha256`` is checked on every load.
    """

    epoch: int
    sha256: str
    uri: str | None = None
    data: bytes | None = field(default=None, repr=False)

    def load(self, registry: Any = None) -> dict[str, Any]:
        """``{"epoch", "model", "optimizer"}``; ``registry``: the one that stores it (by uri)."""
        if self.data is not None:
            data = self.data
            actual = hashlib.sha256(data).hexdigest()
            if actual != self.sha256:
                raise ArtifactIntegrityError(
                    f"checkpoint of epoch {self.epoch} hashes to {actual}, not {self.sha256}"
                )
        elif registry is not None:
            data = registry.artifacts.get(self.sha256, what=f"(checkpoint of epoch {self.epoch})")
        else:
            raise ValueError(
                f"checkpoint of epoch {self.epoch} is in a registry's artifact store ({self.uri}): "
                "pass registry= to load it"
            )
        return state_from_bytes(data)
