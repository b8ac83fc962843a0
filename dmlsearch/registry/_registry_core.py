"""``Registry``'s shared base: its state, argument checks, lookups with "did you mean".

``registry.Registry`` is assembled from mixins over this class (``_registry_runs``,
``_registry_models``, ``_registry_upkeep``); what they all need lives here so that none of
them imports another.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..exceptions import InvalidParameterError
from ._base import ExperimentRecord, ModelVersionRecord, NotFoundError, RegistryStore
from ._checks import INT32_MAX, check_count, check_text

if TYPE_CHECKING:
    from .artifacts import ArtifactStore


def _suggestion(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_model_name(param: str, value: object) -> None:
    hint = ""
    if isinstance(value, ModelVersionRecord):
        hint = (
            "; for a ModelVersionRecord pass its name and version: "
            "load_model(record.model, version=record.version)"
        )
    check_text(param, value, "a model name", hint=hint)


def _check_version(param: str, value: object) -> None:
    check_count(param, value, "a version number", minimum=1, maximum=INT32_MAX, optional=True)


def _check_experiment_key(param: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        hint = ""
        if isinstance(value, ExperimentRecord):
            hint = "; for an ExperimentRecord pass record.name or record.id"
        raise InvalidParameterError(
            param,
            f"expected an experiment name (str) or id (int), got {type(value).__name__} "
            f"{value!r}{hint}",
        )
    if isinstance(value, str):
        check_text(param, value, "an experiment name")
    else:
        check_count(param, value, "an experiment id", minimum=1, maximum=INT32_MAX)


class _RegistryCore:
    """The attributes ``Registry.__init__`` sets and the lookups its parts share."""

    #: The metadata store (set by ``Registry.__init__``).
    store: RegistryStore
    #: The content-addressed store of model files (set by ``Registry.__init__``).
    artifacts: ArtifactStore
    #: The store as named in messages.
    _where: str

    if TYPE_CHECKING:
        # Defined by ``_registry_upkeep._RegistryUpkeep``; used by ``delete_experiment``.
        def gc(self, *, dry_run: bool = False, grace_seconds: float = 3600.0) -> list[str]: ...

    # -- lookups with "did you mean" --------------------------------------------------------
    def _no_experiment(self, key: str | int) -> NotFoundError:
        names = [e.name for e in self.store.list_experiments()]
        hint = _suggestion(key, names) if isinstance(key, str) else ""
        return NotFoundError(f"no experiment {key!r} in {self._where}{hint}")

    def _model_error(self, name: str, exc: NotFoundError) -> NotFoundError:
        """``exc``, or one suggesting a model name when ``name`` is not a model at all."""
        names = self.store.list_models()
        if name in names:
            return exc
        hint = _suggestion(name, names) or (" (no models yet)" if not names else "")
        return NotFoundError(f"no model {name!r} in {self._where}{hint}")

    def experiment(self, name_or_id: str | int) -> ExperimentRecord:
        """The experiment with this name or id; NotFoundError suggests a close name."""
        _check_experiment_key("name_or_id", name_or_id)
        try:
            return self.store.get_experiment(name_or_id)
        except NotFoundError:
            raise self._no_experiment(name_or_id) from None
