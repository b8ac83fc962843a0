#!/usr/bin/env bash
# Issue 13, "no flaky tests": the whole suite 5 times in a row on a fresh clone of a repo.
#   bash experiments/reliability/suite_repeat.sh [REPO (default: this checkout)] [RUNS (default 5)]
# Run 1 is `CI=true bash .ci/run` (fresh venv, ruff, mypy, pytest); runs 2.. are
# `python -m pytest -q -p no:cacheprovider` in the clone's environment. One line per run
# on stdout; each run's whole log in /tmp/suite-repeat-runN.log.
set -u
repo="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
runs="${2:-5}"
clone=/tmp/suite-repeat-clone
rm -rf "$clone" && git clone -q "$repo" "$clone" && cd "$clone" || exit 2
echo "command: bash experiments/reliability/suite_repeat.sh $repo $runs"
echo "clone of $(git rev-parse --short HEAD) at $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$runs"); do
  log=/tmp/suite-repeat-run$i.log
  s=$(date +%s)
  if [ "$i" = 1 ]; then
    what="CI=true bash .ci/run"; CI=true bash .ci/run > "$log" 2>&1; rc=$?
    . .venv/bin/activate
  else
    what="python -m pytest"; python -m pytest -q -p no:cacheprovider > "$log" 2>&1; rc=$?
  fi
  e=$(date +%s)
  echo "run $i ($what): rc=$rc, $((e-s)) s, $(grep -E 'passed|failed' "$log" | tail -1), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%TZ)"
done
