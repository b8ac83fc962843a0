"""The dmlsearch page in a real browser (Debian's headless Chromium, driven by Playwright)."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlsearch import Float, SearchCV
from dmlsearch.testing import SleepyClassifier

CHROMIUM = os.environ.get("DMLSEARCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="needs Chromium: apt-get install chromium chromium-driver (CI's .ci/run does)",
    ),
]


def test_page_shows_trial_rows_growing_while_a_search_runs(cluster, client):
    sync_api = pytest.importorskip("playwright.sync_api")
    name = f"browser-{uuid.uuid4().hex[:6]}"
    X, y = np.random.default_rng(0).normal(size=(40, 3)), np.arange(40) % 2
    search = SearchCV(
        SleepyClassifier(seconds=0.2),
        {"parameter": Float(0.0, 1.0)},
        n_trials=24,
        cv=2,
        client=client,
        experiment_name=name,
        progress=False,
        random_state=0,
        max_concurrent_trials=2,
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            search.fit(X, y)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    url = cluster.dashboard_link.rsplit("/", 1)[0] + "/dmlsearch"
    console_errors: list[str] = []
    thread = threading.Thread(target=run)
    thread.start()
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                ],
            )
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on(
                "console", lambda m: console_errors.append(m.text) if m.type == "error" else None
            )
            page.on("pageerror", lambda e: console_errors.append(str(e)))
            page.goto(url)
            panel = f'section[data-experiment="{name}"]'
            rows = page.locator(f"{panel} table.finished-trials tbody tr")
            running = page.locator(f"{panel} .grid table").nth(1).locator("tbody tr")
            counts, running_counts = [], []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (len(counts) < 2 or counts[-1] < 24):
                counts.append(rows.count())
                running_counts.append(running.count())
                page.wait_for_timeout(500)
            # The status follows the last trials, the refit and the registration.
            with contextlib.suppress(sync_api.TimeoutError):  # a wrong status: asserted below
                page.wait_for_function(
                    f"document.querySelector('{panel} .stats span')?.innerText"
                    " !== 'status: running'",
                    timeout=60_000,
                )
            _freeze(page)
            status = page.locator(f"{panel} .stats span").first.inner_text()
            curve = page.locator(f"{panel} svg path").count()
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / "dashboard-page.png"
            page.screenshot(path=str(shot), full_page=True)
            headings = page.locator(f'section[data-experiment="{name}"] h3').all_inner_texts()
            dask_link = page.locator("#dask-link").get_attribute("href")
            # And the way in: the dashboard's navigation bar links to the page.
            page.goto(cluster.dashboard_link, wait_until="domcontentloaded")
            page.locator('a[href="dmlsearch"]').first.click()
            page.wait_for_url("**/dmlsearch")
            page.locator(panel).wait_for()
            browser.close()
    finally:
        thread.join(timeout=120)
    assert not errors, errors
    seen = [c for c in counts if c > 0]
    # Rows appeared while the search ran and grew to every trial.
    assert len(set(seen)) >= 2, counts
    assert counts[-1] == 24, counts
    assert max(running_counts) > 0, running_counts  # trials in flight were shown
    assert status == "status: complete" and curve == 1
    assert "Leaderboard" in headings and "Best so far against time" in headings
    assert shot.stat().st_size > 10_000
    assert dask_link == "/status"  # back to the dashboard, beside the page
    assert console_errors == []


def _freeze(page: Any) -> None:
    """Stop the page's updates: each poll replaces the panels, and an element read or
    photographed across a replacement is detached (seen on a loaded machine)."""
    # The page's script is classic: poll() looks render up globally at each call, and the
    # browser runs this between two of them.
    page.evaluate("window.render = () => {}")


@contextlib.contextmanager
def _page(cluster: Any, console_errors: list[str]) -> Iterator[Any]:
    """The dmlsearch page of ``cluster`` in headless Chromium; errors go to the list."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: console_errors.append(str(e)))
        page.goto(cluster.dashboard_link.rsplit("/", 1)[0] + "/dmlsearch")
        try:
            yield page
        finally:
            browser.close()


def test_page_shows_the_rungs_of_a_multi_fidelity_search(cluster, client):
    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier

    name = f"rungs-{uuid.uuid4().hex[:6]}"
    X, y = load_digits(return_X_y=True)
    search = SearchCV(
        SGDClassifier(random_state=0),
        {"alpha": Float(1e-5, 1e-1, log=True)},
        scheduler="asha",
        resource="partial_fit",
        max_resource=9,
        n_trials=9,
        cv=2,
        client=client,
        experiment_name=name,
        progress=False,
        random_state=0,
    ).fit(X[:600] / 16.0, y[:600])
    console_errors: list[str] = []
    with _page(cluster, console_errors) as page:
        panel = page.locator(f'section[data-experiment="{name}"]')
        panel.locator("table.rung-counts").wait_for()
        _freeze(page)
        rows = [
            [cell.inner_text() for cell in row.locator("td").all()]
            for row in panel.locator("table.rung-counts tbody tr").all()
        ]
        promotions = panel.locator("table.rung-promotions tbody tr").count()
        headings = panel.locator("h3").all_inner_texts()
        ARTIFACTS.mkdir(exist_ok=True)
        panel.screenshot(path=str(ARTIFACTS / "dashboard-rungs.png"))
    # resource, trials, running, complete, failed, promoted in, restored, best
    assert [(int(r[0]), int(r[1]), int(r[3])) for r in rows] == [
        (n, c, c) for n, c in zip(search.n_resources_, search.n_candidates_, strict=True)
    ]
    assert promotions == sum(search.n_candidates_[1:])
    assert "Rungs" in headings and "Latest promotions" in headings
    assert console_errors == []


def test_page_shows_a_training_job(cluster, client):
    import functools

    torch = pytest.importorskip("torch")
    from dmlsearch.training import DataParallelTrainer

    name = f"train-{uuid.uuid4().hex[:6]}"
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4)).astype(np.float32)
    trainer = DataParallelTrainer(
        functools.partial(torch.nn.Linear, 4, 2),
        torch.nn.functional.cross_entropy,
        functools.partial(torch.optim.SGD, lr=0.1),
        epochs=4,
        batch_size=10,
        client=client,
        experiment_name=name,
    ).fit(X, (X[:, 0] > 0).astype(np.int64))
    console_errors: list[str] = []
    with _page(cluster, console_errors) as page:
        panel = page.locator(f'section[data-experiment="{name}"]')
        panel.locator("table.training-ranks").wait_for()
        page.wait_for_function(
            f"document.querySelector('section[data-experiment=\"{name}\"] .training-stats')"
            ".innerText.includes('status: complete')"
        )
        _freeze(page)
        ranks = [
            [cell.inner_text() for cell in row.locator("td").all()]
            for row in panel.locator("table.training-ranks tbody tr").all()
        ]
        stats = panel.locator(".training-stats span").all_inner_texts()
        curve = panel.locator("svg path").count()
        ARTIFACTS.mkdir(exist_ok=True)
        panel.screenshot(path=str(ARTIFACTS / "dashboard-training.png"))
    workers = set(client.scheduler_info()["workers"])
    assert [r[0] for r in ranks] == ["0", "1"] and {r[1] for r in ranks} == workers
    assert "epoch: 4 / 4" in stats and "sync: allreduce" in stats and "ranks: 2" in stats
    shown = next(s for s in stats if s.startswith("loss: "))
    assert float(shown[6:]) == pytest.approx(trainer.history_[-1]["loss"], rel=1e-3)
    assert curve == 1 and console_errors == []


def test_finished_experiments_beyond_the_newest_show_as_summaries_to_open(cluster, client):
    from dmlsearch.dashboard import DashboardPlugin
    from dmlsearch.dashboard.state import DETAIL_NEWEST

    client.register_plugin(DashboardPlugin())
    run = uuid.uuid4().hex[:6]
    # Sent as a driver does; a client id the scheduler does not know is a driver that left.
    gone = f"gone-{run}"
    events: list[dict[str, Any]] = [
        {"kind": "experiment", "experiment": gone, "meta": {}, "client": f"Client-{run}"}
    ]
    names = [f"done-{run}-{i}" for i in range(DETAIL_NEWEST + 2)]
    for name in names:
        events += [
            {"kind": "experiment", "experiment": name, "meta": {"total": 3}},
            {"kind": "submitted", "experiment": name, "trials": [[i, {"C": i}] for i in range(3)]},
            {
                "kind": "ended",
                "experiment": name,
                "trials": [[i, "complete", i / 3, "w", 0.1, None] for i in range(3)],
            },
            {"kind": "status", "experiment": name, "status": "complete"},
        ]
    client.sync(client.scheduler.dmlsearch_events, events=events)
    console_errors: list[str] = []
    with _page(cluster, console_errors) as page:
        oldest = page.locator(f'section[data-experiment="{names[0]}"]')
        newest = page.locator(f'section[data-experiment="{names[-1]}"]')
        newest.locator("table.finished-trials").wait_for()
        summary = oldest.locator(".stats").first.inner_text()
        summary_tables = oldest.locator("table").count()
        left = page.locator(f'section[data-experiment="{gone}"] .stats span').first.inner_text()
        oldest.locator("button.toggle").click()  # the reader opens it: polled in full
        oldest.locator("table.finished-trials").wait_for()
        rows = oldest.locator("table.finished-trials tbody tr").count()
        oldest.locator("button.toggle").click()  # and closes it
        page.wait_for_function(
            f"!document.querySelector('section[data-experiment=\"{names[0]}\"] table')"
        )
    assert "trials: 3 / 3" in summary and "best: 0.6667" in summary and summary_tables == 0
    assert left == "status: interrupted (driver disconnected)"
    assert rows == 3 and console_errors == []
