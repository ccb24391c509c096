#!/usr/bin/env bash
# pfl-research's environment, apart from mptrain's: .venv-pfl at the repository root (or
# $PFL_VENV) with pfl[pytorch] 0.6.0, torch pinned to the CPU build in constraints-pfl.txt
# beside this file (an unpinned torch brings the CUDA build and GBs of nvidia-* wheels).
#
#   bash benchmarks/baselines/setup_pfl.sh
#   .venv-pfl/bin/python benchmarks/baselines/pfl_fedavg.py --model 2nn --rounds 20
#
# pfl[pytorch] 0.6.0 requires dp-accounting, prv-accountant, multiprocess, numpy, scipy,
# packaging and wheel, plus torch for the extra; dp-accounting brings absl-py, attrs,
# dm-tree (and wrapt), mpmath; multiprocess brings dill. All install from wheels on 3.11
# and 3.12 (pfl declares Requires-Python >=3.10,<3.13). psutil is for the MNIST reader the
# baselines share (benchmarks/common.py). On a GPU machine, see benchmarks/gpu_check.sh pfl.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${PFL_VENV:-$repo/.venv-pfl}"
constraints="$here/constraints-pfl.txt"

python3 -m venv "$venv"
# Keep the environment out of git without touching the repository's .gitignore.
echo '*' > "$venv/.gitignore"
"$venv/bin/pip" install --quiet -c "$constraints" "pfl[pytorch]" torch psutil
"$venv/bin/python" - <<'PY'
import importlib.metadata as m
import torch
assert not torch.version.cuda, "a CUDA torch came in: check constraints-pfl.txt"
import pfl.algorithm  # noqa: F401  (fails here, not in the benchmark, if a requirement is off)
for name in ("pfl", "torch", "numpy", "scipy", "dp-accounting", "multiprocess"):
    print(f"{name} {m.version(name)}")
PY
