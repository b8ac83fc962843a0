"""Regenerate docs/img/dashboard.png: the dmlsearch page in headless Chromium mid-search.

python experiments/dashboard_screenshot.py [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

from distributed import Client
from sklearn.datasets import load_digits
from sklearn.svm import SVC

from dmlsearch import Float, SearchCV
from dmlsearch.testing import local_cluster

OUT = Path(__file__).resolve().parent.parent / "docs" / "img" / "dashboard.png"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    X, y = load_digits(return_X_y=True)
    with local_cluster(2) as cluster, Client(cluster, set_as_default=False) as client:
        searches = [
            SearchCV(
                SVC(),
                {"C": Float(1e-2, 1e3, log=True), "gamma": Float(1e-5, 1e-1, log=True)},
                strategy=strategy,
                n_trials=60,
                cv=3,
                client=client,
                experiment_name=f"digits-svc-{strategy}",
                progress=False,
                random_state=0,
            )
            for strategy in ("tpe", "random")
        ]
        threads = [threading.Thread(target=s.fit, args=(X, y)) for s in searches]
        for t in threads:
            t.start()
        time.sleep(6)
        url = cluster.dashboard_link.rsplit("/", 1)[0] + "/dmlsearch"
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=args.chromium,
                args=["--headless", "--no-sandbox", "--disable-gpu"],
            )
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(url)
            page.wait_for_timeout(2500)
            OUT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(OUT))
            browser.close()
        for t in threads:
            t.join()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
