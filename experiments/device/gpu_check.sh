#!/usr/bin/env bash
# Run experiments/device/gpu_check.py on the GPU machine, from the repository's root:
#   bash experiments/device/gpu_check.sh [WHEEL_DIR [ARGS...]]
# WHEEL_DIR (default .whl), when it exists: its wheels are installed into /tmp/site first
# (no index, no dependencies: carry every missing package; see gpu_check.py's docstring).
# The log goes to $OUT/gpu_check.log when OUT is set. Exits with the check's status.
set -uo pipefail
wheels="${1:-.whl}"
shift || true
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl || exit 2
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
log="${OUT:-/tmp}/gpu_check.log"
mkdir -p "$(dirname "$log")"
timeout -k 10 235 python3 experiments/device/gpu_check.py "$@" 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
