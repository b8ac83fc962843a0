"""A trial that crashes its worker, many times in a row: how many runs of the test pass.

What is run
    ``tests/test_faults.py::test_trial_that_crashes_its_worker_is_the_only_one_failed``
    for each crash mode (``exit``: ``os._exit``; ``segfault``: a read of address 0 through
    ctypes; ``memory``: allocating past the worker's 600 MiB ``memory_limit`` until the
    nanny kills it), ``--runs`` times each (default 50), in one pytest process per mode
    (``DMLSEARCH_CRASH_REPEATS`` parametrizes the repeats; each repeat starts a fresh
    2-worker cluster). Seven trials per run, the fourth crashes; a run passes when that
    trial alone is recorded ``failed`` and named as the culprit, and the six others
    complete, each exactly once.

Rerun
    python experiments/reliability/crash_repeat.py               # 50 runs per mode
    python experiments/reliability/crash_repeat.py --runs 10 --modes exit segfault
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

from _common import print_footer, print_header, print_table

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEST = "tests/test_faults.py::test_trial_that_crashes_its_worker_is_the_only_one_failed"


def run_mode(mode: str, runs: int) -> tuple[int, int, float, list[str]]:
    """(passed, failed, seconds, names of the failed runs) for ``runs`` runs of ``mode``."""
    env = {**os.environ, "DMLSEARCH_CRASH_REPEATS": str(runs)}
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            TEST,
            "-k",
            mode,
            "-q",
            "-p",
            "no:cacheprovider",
            "-rf",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    out = proc.stdout
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", out)) else 0
    failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", out)) else 0
    errors = int(m.group(1)) if (m := re.search(r"(\d+) error", out)) else 0
    names = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, flags=re.MULTILINE)
    if passed + failed + errors == 0:
        print(out[-3000:], proc.stderr[-3000:], sep="\n")
    return passed, failed + errors, seconds, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--modes", nargs="+", default=["exit", "segfault", "memory"])
    args = parser.parse_args()
    print_header("a trial that crashes its worker, repeated", sys.argv, 2)
    rows = []
    for mode in args.modes:
        passed, failed, seconds, names = run_mode(mode, args.runs)
        rows.append([mode, args.runs, passed, failed, seconds])
        for name in names:
            print(f"failed: {name}")
        sys.stdout.flush()
    print_table(["mode", "runs", "passed", "failed", "seconds"], rows)
    print_footer()


if __name__ == "__main__":
    main()
