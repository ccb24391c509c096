#!/bin/bash
# Everything mptrain checks on a lent GPU machine, in two commands that fit 15 minutes of
# device time (an H200 with 16 cores): every --device cuda path (gpu.py), hogwild on
# the caller's CUDA tensors, then the whole test suite with CUDA present -- it finds what only
# a machine with a GPU shows (2026-11-26: workers forked after a backward pass; see
# benchmarks/README.md, "GPU"). Results go to $OUT (gpu.json, pytest.txt, junit.xml).
#
# The GPU machine has torch, click, rich, matplotlib, psutil and pytest but no internet: the
# rest of what mptrain and its tests need comes as wheels, downloaded here beforehand and
# carried with the working tree (`.gpuwheels/`, which git ignores):
#
#   pip download greenlet pytest-xdist execnet pytest-timeout gymnasium cloudpickle \
#       farama-notifications dp-accounting absl-py attrs mpmath dm-tree wrapt \
#       --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       --no-deps -d .gpuwheels
#
# then, from the device tool: run `bash benchmarks/gpu_check.sh paths` and, right after (the
# machine stays warm), `SUITE_S=<budget_left_s - 90> bash benchmarks/gpu_check.sh suite`,
# both with carry [".gpuwheels"]: the two do not fit one command's 10 minutes (on an H200,
# 2026-11-26 16:27: the 13 paths took 235 s; the suite with 14 processes ran 1,094 of its
# 1,167 tests in 220 s). paths takes at most 400 s; SUITE_S bounds the suite (default
# 360 s, what 15 minutes of device time leave after a machine's start and the paths);
# pytest is interrupted, not killed, at the bound, so it still writes which tests failed
# and why (and which skipped: -rs). paths exits with gpu.py's status.
# `bash benchmarks/gpu_check.sh vectorized` (a third command, at most 540 s): fedavg's
# clients one at a time against stacked on the GPU (benchmarks/fl_vectorized.py, 20 rounds
# of each case; $OUT/fl_vectorized.json and .txt).
set -u
WHAT=${1:-}
case "$WHAT" in
    paths|suite|vectorized) ;;
    *) echo "usage: $0 paths|suite|vectorized (separate commands: together they outlast one command's limit)" >&2
       exit 2 ;;
esac
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
if [ -d .gpuwheels ]; then
    python3 -m pip install -q --no-index --find-links .gpuwheels --no-deps greenlet \
        pytest-xdist execnet pytest-timeout gymnasium cloudpickle farama-notifications \
        dp-accounting absl-py attrs mpmath dm-tree wrapt 2>&1 | tail -3
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import sys, torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.is_available(), 'python', sys.version.split()[0])"
echo "cores $(nproc)"; date -u +%H:%M:%S
if [ "$WHAT" = paths ]; then
    timeout 330 python3 benchmarks/gpu.py --timeout 60 --json "$OUT/gpu.json" > "$OUT/gpu.txt" 2>&1
    status=$?
    tail -30 "$OUT/gpu.txt"
    timeout 60 python3 benchmarks/gpu.py --hogwild-check-only 2>&1 | tail -3
    date -u +%H:%M:%S
    exit $status
fi
if [ "$WHAT" = vectorized ]; then
    timeout 540 python3 benchmarks/fl_vectorized.py --device cuda --rounds 20 \
        --json "$OUT/fl_vectorized.json" > "$OUT/fl_vectorized.txt" 2>&1
    status=$?
    tail -14 "$OUT/fl_vectorized.txt"
    date -u +%H:%M:%S
    exit $status
fi
PARALLEL=$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))
timeout -s INT -k 25 "${SUITE_S:-360}" python3 -m pytest -n "$PARALLEL" --dist loadgroup \
    -p no:cacheprovider -q -rfEs --tb=short --junitxml="$OUT/junit.xml" \
    tests > "$OUT/pytest.txt" 2>&1
echo "pytest exit $?"
grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/pytest.txt" | head -50
tail -1 "$OUT/pytest.txt"
date -u +%H:%M:%S
