"""How many trials go into one task: a pure policy, testable without a cluster."""

from __future__ import annotations

import math

__all__ = ["AdaptiveBatcher"]


class AdaptiveBatcher:
    """Sizes batches so that a task lasts about ``target_seconds``.

    Per-task overhead in Dask (scheduling, serialisation, a round trip) is a few
    milliseconds; trials much shorter than that are packed together. The first tasks
    carry one trial each, until a trial duration has been measured. Near the end of a
    search, batches shrink so that the remaining trials are spread over every slot
    instead of landing on one worker.
    """

    def __init__(
        self, target_seconds: float = 0.25, max_batch: int = 512, alpha: float = 0.3
    ) -> None:
        if target_seconds <= 0:
            raise ValueError(f"target_seconds must be > 0, got {target_seconds}")
        self.target_seconds = target_seconds
        self.max_batch = max_batch
        self.alpha = alpha
        self.mean_duration: float | None = None

    def observe(self, durations: list[float]) -> None:
        """Feed the measured durations (seconds) of finished trials."""
        for d in durations:
            d = max(float(d), 1e-5)
            if self.mean_duration is None:
                self.mean_duration = d
            else:
                self.mean_duration = (1 - self.alpha) * self.mean_duration + self.alpha * d

    def size(self, remaining: int | None, n_slots: int) -> int:
        """Trials for the next task, given how many are left (None: unknown) and slots."""
        if self.mean_duration is None:
            return 1
        size = max(1, int(self.target_seconds / self.mean_duration))
        if remaining is not None:
            # Leave about two tasks per slot for what is left, so the tail stays balanced.
            size = min(size, max(1, math.ceil(remaining / (2 * max(n_slots, 1)))))
        return min(size, self.max_batch)
