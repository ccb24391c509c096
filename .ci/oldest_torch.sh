#!/usr/bin/env bash
# The oldest torch that pyproject.toml accepts ("torch>=X": X.0), in a venv of its own
# (.venv-oldest), and under it a tiny run of every strategy and RL algorithm
# (.ci/oldest_torch_smoke.py) and the tests of flat Adam's step without a fused CPU kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
floor=$(sed -n 's/^ *"torch>=\([0-9.]*\)".*/\1/p' pyproject.toml)
if [ -z "$floor" ]; then
    echo "oldest torch: pyproject.toml names no \"torch>=X\"" >&2
    exit 1
fi
started=$SECONDS
python3 -m venv .venv-oldest
# PyPI's Linux torch is a CUDA build: its nvidia-* libraries come along (2.9 GB to download,
# 5 GB installed), and `import torch` loads them on a machine without a GPU too; what a user
# who asks pip for this torch gets. Writing the 5 GB is most of the time; --no-compile spares
# compiling every module of them (a run compiles what it imports). torch 2.2 was built
# against numpy 1: with numpy 2 it has no numpy bridge ("Numpy is not available").
# Only what the smoke and flat Adam's tests use: the test extra's Hugging Face packages would
# have pip look for a pandas and pyarrow of numpy 1's time too. A download that fails twice
# (the registry, not mptrain) is said and skipped; a smoke run that fails fails CI.
install() {
    .venv-oldest/bin/pip install --quiet --progress-bar off --no-compile \
        "torch==$floor" "numpy<2" -e ".[rl,privacy]" \
        "pytest>=7" "pytest-timeout>=2.1" "pytest-xdist>=3.5"
}
if ! install && ! install; then
    echo "oldest torch: SKIPPED: torch==$floor could not be installed twice (pip's error above)"
    exit 0
fi
echo "oldest torch: torch==$floor installed in $((SECONDS - started)) s"
.venv-oldest/bin/python .ci/oldest_torch_smoke.py
.venv-oldest/bin/python -m pytest -q -n 0 -p no:cacheprovider -k bit_for_bit \
    tests/rl/test_rl_flat_adam.py
echo "oldest torch: $((SECONDS - started)) s in all"
