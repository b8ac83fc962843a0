"""A long-lived driver (a notebook) that fits again and again keeps no earlier fit's data."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest
from distributed import Client

from dmlsearch import Float, SearchCV, optimize
from dmlsearch.testing import FailingClassifier

pytestmark = pytest.mark.cluster


def _value(params: dict[str, Any], trial: Any) -> float:
    return float(params["x"])


def _our_handlers(client: Client) -> list[str]:
    return [t for t in client._event_handlers if str(t).startswith("dmlsearch-")]


def test_fits_leave_no_topic_handler_holding_their_data(client: Client) -> None:
    # A probe: distributed's unsubscribe_topic leaves the handler in the client, and ours
    # held the run's loop with its X: the driver grew by the data's size at every fit.
    before = set(_our_handlers(client))
    gone = []
    for seed in range(3):
        X = np.random.default_rng(seed).normal(size=(200, 4))
        y = np.arange(200) % 2
        gone.append(weakref.finalize(X, lambda: None))
        SearchCV(
            FailingClassifier(), {"parameter": [1.0, 2.0]}, strategy="grid", cv=2,
            progress=False, client=client, trial_timeout=30,
        ).fit(X, y)  # fmt: skip
        optimize(_value, {"x": Float(0, 1)}, n_trials=2, client=client, progress=False)
        del X, y
    gc.collect()
    # A closed run's topic keeps, for a while, a function that holds nothing (so that a
    # message already on its way is dropped quietly); then it goes.
    from dmlsearch.runner import reports

    left = set(_our_handlers(client)) - before
    assert all(client._event_handlers[t] is reports._late_message for t in left)
    assert not any(f.alive for f in gone)
    reports._forget(client._event_handlers, next(iter(left)))
    assert len(set(_our_handlers(client)) - before) == len(left) - 1


def test_a_search_that_raises_keeps_neither_its_futures_nor_its_data(client: Client) -> None:
    # A probe: re-raising the trial's error added the loop's frames to the exception the
    # client keeps for the future, and the future stayed in client.futures for good.
    gone = []
    for seed in range(3):
        X = np.random.default_rng(seed).normal(size=(200, 4))
        y = np.arange(200) % 2
        gone.append(weakref.finalize(X, lambda: None))
        search = SearchCV(
            FailingClassifier(), {"fail": [False, True]}, strategy="grid", cv=2,
            error_score="raise", progress=False, client=client,
        )  # fmt: skip
        with pytest.raises(ValueError):
            search.fit(X, y)
        del X, y, search
    gc.collect()
    assert not any(f.alive for f in gone), [f.alive for f in gone]
    left = [k for k in client.futures if "FailingClassifier" in str(k) or "trial" in str(k)]
    assert not left, left
