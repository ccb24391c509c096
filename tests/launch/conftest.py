"""Reference runs that several torchrun tests compare against, each made once per session:
two nodes on loopback take ~10 s to start on 2 cores (six interpreters import torch)."""

from __future__ import annotations

import pytest
from test_multinode import FACTORY, REFERENCE_EPOCHS, run_two_nodes


@pytest.fixture(scope="session")
def uninterrupted_two_node_run(tmp_path_factory):
    """``run(strategy)``: the --out folder of an uninterrupted two-node run of
    ``REFERENCE_EPOCHS`` epochs on the test workload (``FACTORY``)."""
    runs = {}

    def run(strategy: str):
        if strategy not in runs:
            folder = tmp_path_factory.mktemp(f"uninterrupted-{strategy}")
            run_two_nodes(folder, FACTORY + ["--strategy", strategy,
                                             "--epochs", str(REFERENCE_EPOCHS), "--out", "out"])
            runs[strategy] = folder / "out"
        return runs[strategy]
    return run
