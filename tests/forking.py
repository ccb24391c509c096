"""The start method of tests that fork trainers by hand, to hand them what cannot be pickled."""

import pytest

from mptrain.launch.start_method import fork_unsafe_reason


def fork_or_skip() -> str:
    """``"fork"``, or a skip where this test process can no longer fork trainers: on a machine
    with a GPU, once an earlier test ran a backward pass or an Adam step here (mptrain
    itself would start its workers from a fork server; ``tests/launch/test_autograd_fork.py``)."""
    unsafe = fork_unsafe_reason()
    if unsafe:
        pytest.skip(f"cannot fork trainers: {unsafe}")
    return "fork"
