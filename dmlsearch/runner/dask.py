"""The search's runner: strategy trials through the one futures loop.

:class:`DaskRunner` keeps the interface ``SearchCV`` uses; the work happens in
:class:`~dmlsearch.runner.loop.WorkLoop` with trials as one kind of unit
(:mod:`dmlsearch.runner.trials`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import dask
from distributed import Client

from .._evaluate import EvalContext, SearchData, TrialOutcome, TrialSpec
from ..progress import NullProgress
from ..strategies import Strategy
from .loop import RunStats, WorkLoop
from .trials import StrategySource, TrialKind
from .units import UnitPolicy

__all__ = ["DaskRunner", "RunObserver", "RunStats"]


class RunObserver:
    """Hears what a run does (the dashboard reporter is one); every hook is a no-op here.

    Hooks run on the driver inside the runner's loop, so they must be quick and must not
    raise.
    """

    def trials_submitted(self, specs: list[TrialSpec]) -> None:
        """Trials just sent to the cluster."""

    def trial_finished(self, outcome: TrialOutcome, value: float | None) -> None:
        """A trial recorded, with the objective told to the strategy (None if it failed)."""

    def tick(self) -> None:
        """Once per pass of the runner's loop (a few times a second)."""


class DaskRunner:
    """Runs a strategy's trials on a Dask cluster, asynchronously.

    ``on_outcome`` is called on the driver for each trial as it ends (exactly once per
    trial number). It returns the objective told to the strategy (or ``None``).
    ``time_budget`` counts from ``budget_start`` (``time.monotonic()``; default: now);
    ``budget_policy`` says what happens to trials running when it ends: ``"stop"`` them
    (recorded ``"stopped"``) or let them ``"finish"``. Trials not started by then never start.
    """

    def __init__(
        self,
        client: Client,
        *,
        max_concurrent_trials: int | None = None,
        trial_timeout: float | None = None,
        max_retries: int = 2,
        target_task_seconds: float = 0.25,
        poll_interval: float = 0.2,
        progress: NullProgress | None = None,
        name: str = "search",
        time_budget: float | None = None,
        budget_policy: str = "stop",
        budget_start: float | None = None,
        observer: RunObserver | None = None,
        no_workers_timeout: float | None = None,
        seeded: bool = False,
    ) -> None:
        self.client = client
        self.max_concurrent_trials = max_concurrent_trials
        self.trial_timeout = trial_timeout
        self.max_retries = max_retries
        self.target_task_seconds = target_task_seconds
        self.poll_interval = poll_interval
        self.progress = progress or NullProgress()
        self.name = name
        self.time_budget = time_budget
        self.budget_policy = budget_policy
        self.budget_start = budget_start
        self.observer = observer or RunObserver()
        if no_workers_timeout is None:
            no_workers_timeout = float(dask.config.get("dmlsearch.no-workers-timeout", 60.0))
        self.no_workers_timeout = no_workers_timeout
        self.seeded = seeded
        self.stats = RunStats()

    def _threads(self) -> list[int]:
        """Threads per worker, read once per run (empty if the scheduler cannot say)."""
        try:
            return list(self.client.nthreads().values())
        except Exception:
            return []

    def _check_one_thread(self, threads: list[int], context: EvalContext) -> None:
        """Seeded trials reproduce on 1 or N workers only if each worker has one thread."""
        if not (self.seeded and context.seed_globals) or not any(n > 1 for n in threads):
            return
        warnings.warn(
            f"the cluster's workers run {max(threads)} threads each: trials that share "
            "a worker process share numpy's and random's global generators, so "
            "estimators with random_state=None may not give the same results on "
            "another cluster. Use workers with one thread each (threads_per_worker=1) "
            "for results that reproduce exactly.",
            UserWarning,
            stacklevel=4,
        )

    def run(
        self,
        strategy: Strategy,
        data: SearchData,
        context: EvalContext,
        seed: int,
        on_outcome: Callable[[TrialOutcome], float | None],
        *,
        skip: set[int] | frozenset[int] = frozenset(),
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        """Run every trial the strategy proposes; ``skip`` lists numbers already done."""
        threads = self._threads()
        self._check_one_thread(threads, context)
        policy = UnitPolicy(
            max_retries=self.max_retries,
            timeout=self.trial_timeout,
            report_starts=True,
            timeout_name="trial_timeout",
        )
        max_units = self.max_concurrent_trials
        if max_units is None and strategy.adaptive:
            # A model-based strategy learns from results: don't ask far ahead of them.
            max_units = 2 * max(1, sum(threads))
        budget_ends = None
        if self.time_budget is not None:
            start = time.monotonic() if self.budget_start is None else self.budget_start
            budget_ends = start + self.time_budget
        observer = self.observer

        def tick() -> None:
            if on_tick is not None:
                on_tick()
            observer.tick()

        loop: WorkLoop[TrialSpec, TrialOutcome] = WorkLoop(
            self.client,
            TrialKind(data, context, policy),
            StrategySource(
                strategy,
                seed,
                on_outcome,
                skip=skip,
                observer=observer,
                estimator=context.estimator,
            ),
            max_units_in_flight=max_units,
            target_task_seconds=self.target_task_seconds,
            poll_interval=self.poll_interval,
            progress=self.progress,
            name=self.name,
            budget_ends=budget_ends,
            budget_policy=self.budget_policy,
            no_workers_timeout=self.no_workers_timeout,
            on_tick=tick,
        )
        self.stats = loop.stats
        loop.run()  # raises SchedulerLostError if the scheduler dies
