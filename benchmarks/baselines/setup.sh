#!/usr/bin/env bash
# The RL baselines' environment, apart from mptrain's: .venv-baselines at the repository root
# (or $BASELINES_VENV) with stable-baselines3 and CleanRL 1.2.0, torch pinned to the CPU build
# in constraints.txt beside this file. The repository's own install gains nothing from it.
#
#   bash benchmarks/baselines/setup.sh
#   .venv-baselines/bin/python benchmarks/baselines/sb3_ppo.py --seeds 1,2,3 --json out.json
#
# CleanRL 1.2.0 declares Requires-Python <3.11 and pins stable-baselines3==1.2.0, wandb,
# huggingface-hub, pygame==2.1.0 and moviepy; its ppo.py imports only gym, torch, numpy and
# tensorboard of them, and gym 0.23.1's CartPole imports pygame. So it goes in with --no-deps
# --ignore-requires-python, and only those come in, at the versions in constraints.txt
# (pygame 2.6.1: 2.1.0 has no wheel for 3.11). ppo.py runs unchanged on 3.11: distutils,
# which it imports for strtobool, is still in 3.11's standard library. pip then reports
# CleanRL's other requirements as missing or conflicting: expected, and harmless to ppo.py.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${BASELINES_VENV:-$repo/.venv-baselines}"
constraints="$here/constraints.txt"

python3 -m venv "$venv"
# Keep the environment out of git without touching the repository's .gitignore.
echo '*' > "$venv/.gitignore"
"$venv/bin/pip" install --quiet -c "$constraints" torch gymnasium numpy stable-baselines3 \
    tensorboard gym pygame
"$venv/bin/pip" install --quiet -c "$constraints" --no-deps --ignore-requires-python cleanrl
"$venv/bin/python" - <<'PY'
import importlib.metadata as m
import torch
assert not torch.version.cuda, "a CUDA torch came in: check constraints.txt"
for name in ("torch", "stable-baselines3", "cleanrl", "gym", "gymnasium", "numpy"):
    print(f"{name} {m.version(name)}")
PY
