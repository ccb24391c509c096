"""Workers that are not forked unpickle a model whose class comes from ``--model
path/to/file.py:make``.

Such a file is imported under a made-up module name (``mptrain_user_<stem>_<hash>``) that
only the parent knows: spawn'd and forkserver workers died unpickling the model with
``ModuleNotFoundError: No module named 'mptrain_user_nets_...'`` -- every such run with
``--device cuda`` (spawn is the default there) or ``--start-method spawn|forkserver``.
"""

from __future__ import annotations

import multiprocessing
import textwrap

import pytest

from mptrain.imports import load_object
from mptrain.launch.supervisor import Supervisor


@pytest.fixture
def keep_default_start_method():
    """Starting a spawn or forkserver process fixes this process's default start method
    (see tests/launch/test_supervisor.py): put it back."""
    default = multiprocessing.context._default_context
    saved = default._actual_context
    yield
    default._actual_context = saved


def report_the_model(rank, channel, model):
    channel.send((type(model).__module__, type(model).__name__, model.tag))


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("keep_default_start_method")
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_workers_that_are_not_forked_unpickle_a_model_from_a_file_path(tmp_path,
                                                                       start_method):
    nets = tmp_path / f"chaos_nets_{start_method}.py"
    nets.write_text(textwrap.dedent("""\
        class Net:
            tag = "from the user's file"

        def make():
            return Net()
        """))
    model = load_object(f"{nets}:make", "--model")()
    received = []
    supervisor = Supervisor(start_method, on_message=lambda rank, payload:
                            received.append(payload))
    result = supervisor.run(report_the_model, [(model,)])

    assert result.ok, [failure.describe() for failure in result.failures] + \
        [failure.traceback for failure in result.failures]
    assert received == [(type(model).__module__, "Net", "from the user's file")]
