"""``Registry``'s experiments and trials: deletion, tables and export to Optuna.

Separate from the model versions (``_registry_models``): the two share only the core.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ._base import COMPLETE, NotFoundError, TrialRecord
from ._checks import check_count, check_states
from ._registry_core import _RegistryCore

if TYPE_CHECKING:
    import pandas as pd


class _RegistryRuns(_RegistryCore):
    """The experiment and trial methods of ``Registry``."""

    def delete_experiment(self, name_or_id: str | int, *, force: bool = False) -> dict[str, Any]:
        """Delete an experiment and its trials, then the blobs nothing references any more.

        An experiment that a driver may still be running (the heuristic of ``dmlsearch
        delete``, docs/cli.md) is refused with InvalidParameterError: deleting it would
        make that run fail. ``force=True`` deletes it all the same.

        Model versions registered from the experiment are kept (they are models users load;
        their lineage still names it), so are their artifacts and every blob written in the
        last hour (see :meth:`gc`). The trials' out-of-fold predictions (``keep_oof``) go
        with the experiment. Returns ``{"experiment": name, "id": id, "trials": n,
        "artifacts": [deleted paths]}``. Raises NotFoundError (suggesting a close name) if
        there is no such experiment.
        """
        from .._experiment import check_not_running
        from .._oof import delete_folder

        exp = self.experiment(name_or_id)
        if not force:
            check_not_running(self.store, exp, "delete-python")
        try:
            n_trials = self.store.delete_experiment(exp.id)
        except NotFoundError:  # deleted by another process meanwhile
            raise self._no_experiment(name_or_id) from None
        removed = delete_folder(self, exp) + self.gc()
        return {"experiment": exp.name, "id": exp.id, "trials": n_trials, "artifacts": removed}

    def experiments(self) -> pd.DataFrame:
        """One row per experiment: id, name, kind (``search``, ``optimize`` or ``train``),
        status, created, number of trials, best value."""
        import pandas as pd

        summaries = self.store.experiment_summaries()
        rows = []
        for exp in self.store.list_experiments():
            n_trials, best = summaries.get(exp.id, (0, None))
            if _minimized(exp) or _multifidelity(exp):  # the store's is the greatest value
                values = [t.value for t in self._ranked(exp, None)[:1]]
                best = values[0] if values else None
            rows.append(
                {
                    "id": exp.id,
                    "name": exp.name,
                    # A search's config has no kind; optimize and training jobs say theirs.
                    "kind": str((exp.config or {}).get("kind", "search")),
                    "status": exp.status,
                    "created": pd.Timestamp(exp.created, unit="s", tz="UTC"),
                    "trials": n_trials,
                    "best_value": best,
                }
            )
        columns = ["id", "name", "kind", "status", "created", "trials", "best_value"]
        return pd.DataFrame(rows, columns=columns)

    def trials(
        self, experiment: str | int, state: str | Sequence[str] | None = None
    ) -> pd.DataFrame:
        """The trials of an experiment as a DataFrame (``param_<name>`` columns)."""
        check_states("state", state)
        exp = self.experiment(experiment)
        return self.store.trials_dataframe(exp.id, state=state)

    def leaderboard(self, experiment: str | int, k: int = 10) -> pd.DataFrame:
        """The ``k`` best completed trials, best first, ranked as :meth:`best_trials` ranks
        them; a multi-fidelity search's have a ``resource`` column (the highest reached)."""
        import pandas as pd

        check_count("k", k, "a number of trials")
        exp = self.experiment(experiment)
        staged = _multifidelity(exp)
        rows = [
            {
                "number": t.number,
                "value": t.value,
                **({"resource": resource_reached(t)} if staged else {}),
                **{f"param_{n}": v for n, v in t.params.items()},
            }
            for t in self._ranked(exp, k)
        ]
        return pd.DataFrame(rows)

    def best_trials(self, experiment: str | int, k: int = 10) -> list[TrialRecord]:
        """The ``k`` best completed trials' records, best first.

        Greatest value first; least first for an experiment of :func:`dmlsearch.optimize`
        with ``direction="minimize"``; for a multi-fidelity search, the highest resource
        reached first, then the value (as its ``best_index_`` picks: a trial stopped at a
        low rung with a lucky score does not rank above one trained to the top).
        """
        check_count("k", k, "a number of trials")
        return self._ranked(self.experiment(experiment), k)

    def _ranked(self, exp: Any, k: int | None) -> list[Any]:
        """``exp``'s ``k`` best completed trials (None: all), best first."""
        minimized, staged = _minimized(exp), _multifidelity(exp)
        if not minimized and not staged:
            return self.store.leaderboard(exp.id, k=k if k is not None else 2**31 - 1)
        done = [
            t
            for t in self.store.get_trials(exp.id, state=COMPLETE)
            if t.value is not None and not math.isnan(t.value)
        ]
        sign = 1.0 if minimized else -1.0
        done.sort(
            key=lambda t: (-resource_reached(t) if staged else 0, sign * (t.value or 0.0), t.number)
        )
        return done if k is None else done[:k]

    def to_optuna(self, experiment: str | int, storage: Any = None) -> Any:
        """Copy an experiment's trials into an Optuna study (maximised objective; minimised
        for an experiment of :func:`dmlsearch.optimize` with ``direction="minimize"``).

        ``optuna.visualization`` and optuna-dashboard then work on our trials. ``storage``
        is any Optuna storage (URL or object); default in memory. Distributions are
        inferred from the recorded values: numbers span their observed range (log scale
        when positive over more than two decades), anything else is categorical.
        """
        exp = self.experiment(experiment)
        return optuna_study(exp, self.store.get_trials(exp.id), storage=storage)


def optuna_study(
    exp: Any,
    trials: Sequence[TrialRecord],
    *,
    storage: Any = None,
    params_of: Sequence[TrialRecord] | None = None,
) -> Any:
    """An Optuna study of experiment ``exp``'s ``trials``: completed ones with their
    value, pruned ones as pruned, the others as failed, each with its reported steps as
    intermediate values (:meth:`Registry.to_optuna`). The distributions are
    inferred from the parameters of ``params_of`` (default: ``trials``), so that a study of
    a sample of the trials spans the ranges of them all."""
    import optuna

    distributions = _infer_distributions([t.params for t in (params_of or trials)])
    study = optuna.create_study(
        study_name=exp.name,
        storage=storage,
        direction=experiment_direction(exp),
        load_if_exists=False,
    )
    study.set_user_attr("dmlsearch_experiment_id", exp.id)
    frozen = []
    states = optuna.trial.TrialState
    for t in trials:
        params = {k: _optuna_value(v) for k, v in t.params.items() if k in distributions}
        complete = t.state == "complete" and t.value is not None
        state = states.COMPLETE if complete else states.FAIL
        if t.state == "pruned":  # an optimize trial its pruner stopped
            state = states.PRUNED
        frozen.append(
            optuna.trial.create_trial(
                params=params,
                distributions={k: distributions[k] for k in params},
                value=t.value if complete else None,
                state=state,
                # The reported curve (plot_intermediate_values): steps as recorded.
                intermediate_values={
                    int(k): float(v)
                    for k, v in t.intermediate.items()
                    if str(k).isdigit() and isinstance(v, (int, float)) and math.isfinite(v)
                },
                user_attrs={"dmlsearch_number": t.number, "worker": t.worker or ""},
            )
        )
    study.add_trials(frozen)
    return study


def _optuna_value(value: Any) -> Any:
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value
    return repr(value)


def _infer_distributions(all_params: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    import math

    from optuna.distributions import CategoricalDistribution, FloatDistribution

    values: dict[str, list[Any]] = {}
    for params in all_params:
        for key, value in params.items():
            values.setdefault(key, []).append(_optuna_value(value))
    out: dict[str, Any] = {}
    for key, vals in values.items():
        numeric = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numeric) == len(vals) and all(math.isfinite(v) for v in numeric):
            low, high = float(min(numeric)), float(max(numeric))
            log = low > 0 and high / low > 100
            out[key] = FloatDistribution(low, high if high > low else low + 1e-12, log=log)
        else:
            choices: list[Any] = []
            for v in vals:
                if v not in choices:
                    choices.append(v)
            out[key] = CategoricalDistribution(choices)
    return out


def experiment_direction(exp: Any) -> Literal["minimize", "maximize"]:
    """``"minimize"`` where ``exp``'s values are better smaller (``optimize(direction=
    "minimize")``), else ``"maximize"``: every other experiment's are better greater, as
    the store ranks them."""
    return "minimize" if (exp.config or {}).get("direction") == "minimize" else "maximize"


def _minimized(exp: Any) -> bool:
    return experiment_direction(exp) == "minimize"


def _multifidelity(exp: Any) -> bool:
    """Whether ``exp`` is a multi-fidelity search (its trials ranked by resource first;
    an ``optimize`` experiment with a pruner ranks by its objective's values alone)."""
    config = exp.config or {}
    return "schedule" in config and config.get("kind", "search") == "search"


def resource_reached(trial: Any) -> int:
    """The highest resource a multi-fidelity trial has a mean score at (0: none): its
    ``intermediate`` keys that are whole numbers (see ``dmlsearch._rung_records``)."""
    return max((int(key) for key in trial.intermediate if key.isdigit()), default=0)
