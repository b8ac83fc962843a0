"""Driver loss: SIGKILL ``dmlsearch run`` at random points, then ``dmlsearch resume``.

What is run, ``--points`` times (default 20), each in a fresh folder and SQLite registry
    ``dmlsearch run exp.yaml --no-progress`` of a random search of ``--trials`` (default 40)
    trials of ``dmlsearch.testing.SleepyClassifier`` (0.1 s per fold, ``cv=2``) on the
    embedded cluster; the driver process alone is SIGKILLed after a delay drawn uniformly
    from ``[0.5, --max-delay]`` seconds (default 12: the whole run takes about 8 to 10 s
    here, so some kills land in start-up and a few after the end). Then
    ``dmlsearch resume exp.yaml`` and ``dmlsearch registry verify``.

Checked per point
    * ``dmlsearch resume`` (``run`` again when the kill came before the experiment was
      recorded) exits 0;
    * the trials complete before the kill are not rerun (same start time after resume);
    * the final count is exact: trial numbers 0..N-1, each once, all ``complete``;
    * ``dmlsearch registry verify`` exits 0;
    * the killed driver's worker processes are gone within 15 s.

Rerun
    python experiments/reliability/driver_loss.py               # 20 points
    python experiments/reliability/driver_loss.py --points 3    # a quick check
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import psutil
from _common import print_footer, print_header, print_table

from dmlsearch import Registry

EXPERIMENT = """\
version: 1
name: driver-loss
data:
  dataset: sklearn:load_iris
model:
  class: dmlsearch.testing.SleepyClassifier
  params: {{seconds: 0.1}}
search:
  space:
    parameter: {{type: float, low: 0.0, high: 1.0}}
  strategy: random
  n_trials: {trials}
  cv: 2
  random_state: 0
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "dmlsearch", *args]


def one_point(args: argparse.Namespace, delay: float) -> dict[str, object]:
    folder = tempfile.mkdtemp(prefix="dmlsearch-driver-loss-")
    path = os.path.join(folder, "exp.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(EXPERIMENT.format(trials=args.trials))
    url = f"sqlite:///{folder}/dmlsearch.db"
    env = {**os.environ, "DMLSEARCH_REGISTRY": url}
    proc = subprocess.Popen(
        _cli("run", path, "--no-progress"),
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    children: list[psutil.Process] = []
    end = time.monotonic() + delay
    while time.monotonic() < end and proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.05)
    finished_first = proc.poll() is not None
    if not finished_first:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _, alive = psutil.wait_procs(children, timeout=15)
    orphans = len(alive)
    for p in alive:  # do not leave them to the next point
        p.kill()

    before: dict[int, float] = {}
    recorded = True
    try:
        with Registry(url, create=False) as reg:
            frame = reg.trials("driver-loss", state="complete")
            before = dict(zip(frame["number"], frame["started"], strict=True))
    except Exception:  # killed before the experiment was recorded: run it again
        recorded = False
    command = "resume" if recorded else "run"
    resume = subprocess.run(
        _cli(command, path, "--no-progress"), cwd=folder, env=env, capture_output=True, text=True
    )
    verify = subprocess.run(
        _cli("registry", "verify"), cwd=folder, env=env, capture_output=True, text=True
    )
    with Registry(url, create=False) as reg:
        frame = reg.trials("driver-loss")
    numbers = sorted(frame["number"].tolist())
    after = dict(zip(frame["number"], frame["started"], strict=True))
    rerun = sum(1 for n, started in before.items() if after.get(n) != started)
    return {
        "delay": delay,
        "killed": not finished_first,
        "then": command,
        "done_before": len(before),
        "resume_rc": resume.returncode,
        "exact": numbers == list(range(args.trials)) and set(frame["state"]) == {"complete"},
        "rerun": rerun,
        "verify_rc": verify.returncode,
        "orphans": orphans,
        "error": (resume.stderr.strip().splitlines() or [""])[-1] if resume.returncode else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--max-delay", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print_header("driver loss: SIGKILL dmlsearch run, then resume", sys.argv, "embedded")
    rng = random.Random(args.seed)
    rows = []
    ok = 0
    for _ in range(args.points):
        r = one_point(args, rng.uniform(0.5, args.max_delay))
        good = (
            r["resume_rc"] == 0
            and r["exact"]
            and r["rerun"] == 0
            and r["verify_rc"] == 0
            and r["orphans"] == 0
        )
        ok += good
        rows.append(
            [
                f"{r['delay']:.2f}",
                "yes" if r["killed"] else "no (ended first)",
                r["then"],
                r["done_before"],
                r["resume_rc"],
                str(r["exact"]),
                r["rerun"],
                r["verify_rc"],
                r["orphans"],
                "ok" if good else f"FAIL {r['error']}",
            ]
        )
        print(" ".join(str(c) for c in rows[-1]))
        sys.stdout.flush()
    print()
    print_table(
        [
            "kill after s",
            "killed",
            "then",
            "complete before",
            "resume rc",
            "exact",
            "rerun",
            "verify rc",
            "orphans",
            "result",
        ],
        rows,
    )
    print(f"{ok} of {args.points} points passed")
    print_footer()


if __name__ == "__main__":
    main()
