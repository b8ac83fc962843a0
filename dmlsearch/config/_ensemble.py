"""The ``ensemble:`` section: an ensemble selected from the search's trials, registered."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from ._common import _Problems, check_model_name
from ._data_model import PosInt, _Section


class EnsembleSection(_Section):
    """After the search, ``EnsembleSelection(search, ensemble_size=size, n_init=...,
    max_candidates=...)`` on the same data, registered as model ``model_name`` (default
    ``<experiment name>-ensemble``) with its members. The search keeps its trials'
    out-of-fold predictions for it (``keep_oof=True``)."""

    kind: Literal["selection"]
    size: PosInt = 50
    #: None: 5, or ``size`` when that is smaller.
    n_init: PosInt | None = None
    max_candidates: PosInt = 50
    model_name: str | None = None

    @model_validator(mode="after")
    def _check(self) -> EnsembleSection:
        problems = _Problems()
        if self.n_init is not None and self.n_init > self.size:
            problems.add(("n_init",), f"n_init ({self.n_init}) must be <= size ({self.size})")
        if self.model_name is not None and not self.model_name.strip():
            problems.add(("model_name",), "expected a non-empty model name")
        else:  # its members are registered as "<model_name>-members"
            check_model_name(problems, ("model_name",), self.model_name, "-members")
        problems.raise_if_any("EnsembleSection")
        return self

    def selection_kwargs(self) -> dict[str, Any]:
        """The ``EnsembleSelection`` arguments this section stands for."""
        return {
            "ensemble_size": self.size,
            "n_init": min(5, self.size) if self.n_init is None else self.n_init,
            "max_candidates": self.max_candidates,
        }
