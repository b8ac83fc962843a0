"""A driver that dies mid-search (``kill -9``, a batch system's SIGTERM) leaves no experiment
"running" on the dmlsearch page: the scheduler's plugin ends it when its client leaves."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from dmlsearch.dashboard import DashboardPlugin
from dmlsearch.dashboard.state import DISCONNECTED

pytestmark = pytest.mark.cluster

DRIVER = textwrap.dedent(
    """
    import sys

    import numpy as np
    from distributed import Client

    from dmlsearch import Float, SearchCV
    from dmlsearch.testing import SleepyClassifier

    client = Client(sys.argv[1])
    X, y = np.random.default_rng(0).normal(size=(40, 3)), np.arange(40) % 2
    SearchCV(
        SleepyClassifier(seconds=0.5),
        {"parameter": Float(0.0, 1.0)},
        n_trials=400,
        cv=2,
        client=client,
        experiment_name=sys.argv[2],
        progress=False,
        max_concurrent_trials=2,
    ).fit(X, y)
    """
)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def _view(base: str, name: str, done: Callable[[dict[str, Any]], bool], timeout: float) -> Any:
    """The page's experiment ``name`` in full once ``done`` holds (or the deadline passes)."""
    deadline = time.monotonic() + timeout
    while True:
        state = json.loads(_get(f"{base}/dmlsearch/api/state?experiment={name}"))
        view = next((e for e in state["experiments"] if e["name"] == name), {})
        if (view and done(view)) or time.monotonic() > deadline:
            return view
        time.sleep(0.1)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_driver_leaves_its_experiment_interrupted_not_running(cluster, client, how):
    base = cluster.dashboard_link.rsplit("/", 1)[0]
    client.register_plugin(DashboardPlugin())  # the page exists before the driver starts
    name = f"killed-{uuid.uuid4().hex[:6]}"
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, cluster.scheduler_address, name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Importing dmlsearch and starting the search: seconds on a loaded machine.
        live = _view(base, name, lambda v: v["in_flight"] > 0, timeout=120)
    finally:
        driver.send_signal(how)
        driver.wait(timeout=30)
    assert live and live["status"] == "running" and live["in_flight"] > 0, live
    # The scheduler sees the client's stream close at once on localhost.
    view = _view(base, name, lambda v: v["status"] != "running", timeout=30)
    assert view["status"] == "interrupted" and view["reason"] == DISCONNECTED, view
    assert view["in_flight"] == 0 and view["running"] == [] and view["ended"] is not None
    metrics = _get(base + "/metrics").decode()
    assert re.search(rf'dmlsearch_trials_in_flight\{{experiment="{name}",[^}}]*\}} 0\.0', metrics)
    assert re.search(
        rf'dmlsearch_experiment_status\{{experiment="{name}",[^}}]*status="interrupted"\}} 1\.0',
        metrics,
    ), metrics
    assert re.search(
        rf'dmlsearch_experiment_status\{{experiment="{name}",[^}}]*status="running"\}} 0\.0',
        metrics,
    )
