"""The ``scheduler:`` section: multi-fidelity search (successive halving, Hyperband, ASHA)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from ._common import _err, _Problems, _suggest
from ._data_model import PosInt, _no_bool, _Section

#: The names ``SearchCV(scheduler=...)`` takes (``dmlsearch.schedulers.SCHEDULERS``; not
#: imported from there so that reading a config never imports the schedulers).
SCHEDULER_NAMES = ("asha", "hyperband", "halving", "median")


class SchedulerSection(_Section):
    """``SearchCV(scheduler=kind, resource=..., min_resource=..., max_resource=...,
    reduction_factor=..., state_store=...)``: train many trials on a small budget, more only on the best.

    ``resource`` names what the budget counts: ``partial_fit`` (epochs), ``n_samples``
    (training rows) or an estimator parameter such as ``n_estimators`` or ``max_iter``.
    ``min_resource`` left out is ``SearchCV``'s default: ``2 * n_splits * n_classes`` rows
    for ``n_samples``, else 1.
    """

    kind: Literal["asha", "hyperband", "halving", "median"]
    resource: str
    # None, as SearchCV's: for n_samples it is resolved against the data (a few rows per
    # fold and class), which a fixed 1 is not (rung 0 trained each fold on 2 rows).
    min_resource: PosInt | None = None
    max_resource: PosInt
    reduction_factor: Annotated[int, BeforeValidator(_no_bool), Field(ge=2)] = 3
    state_store: str | bool = "auto"

    @field_validator("state_store", mode="before")
    @classmethod
    def _state_store(cls, value: Any) -> Any:
        # SearchCV's own rule ("auto", false, or a folder/fsspec URL); a file has no null.
        from .._rung_store import check_state_store
        from ..exceptions import InvalidParameterError

        try:
            check_state_store(value)
        except InvalidParameterError as exc:
            if isinstance(value, str) and value.strip():  # a location: say what is wrong
                raise _err(str(exc).removeprefix("state_store: ")) from None
        else:
            if value is not None:
                return value.strip() if isinstance(value, str) else value
        raise _err(
            f"expected auto, false, or a folder or fsspec URL every worker can read, got {value!r}"
        )

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() in SCHEDULER_NAMES:
            return value.lower()
        if isinstance(value, str):
            raise _err(
                f"unknown scheduler {value!r}; choose one of {', '.join(SCHEDULER_NAMES)}"
                f"{_suggest(value, SCHEDULER_NAMES)}"
            )
        return value

    @field_validator("resource", mode="before")
    @classmethod
    def _resource(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            raise _err(
                "expected partial_fit, n_samples or an estimator parameter name "
                f"(e.g. n_estimators, max_iter), got {value!r}"
            )
        return value.strip()

    @model_validator(mode="after")
    def _check(self) -> SchedulerSection:
        if self.min_resource is not None and self.min_resource > self.max_resource:
            problems = _Problems()
            problems.add(
                ("min_resource",),
                f"min_resource ({self.min_resource}) must be <= max_resource ({self.max_resource})",
            )
            problems.raise_if_any("SchedulerSection")
        return self

    def search_kwargs(self) -> dict[str, Any]:
        """The ``SearchCV`` arguments this section stands for."""
        return {
            "scheduler": self.kind,
            "resource": self.resource,
            "min_resource": self._min_resource(),
            "max_resource": self.max_resource,
            "reduction_factor": self.reduction_factor,
            "state_store": self.state_store,
        }

    def _min_resource(self) -> int | None:
        if self.min_resource is None and self.resource != "n_samples":
            # What SearchCV resolves None to for any other resource; written out so that
            # experiments run before this default changed still resume (same schedule).
            return 1
        return self.min_resource


def check_resource_problem(section: SchedulerSection, estimator: Any) -> str | None:
    """Why ``estimator`` cannot take ``section.resource`` (None: it can)."""
    from ..exceptions import InvalidParameterError
    from ..fidelity import check_resource

    try:
        check_resource(section.resource, estimator)
    except InvalidParameterError as exc:
        return str(exc).removeprefix(f"{exc.param}: ")
    return None
