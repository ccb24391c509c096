"""``fit`` called from a user's script whose model class and data live in ``__main__``.

Fork inherits ``__main__``, so scripts work with or without the ``if __name__ ==
"__main__":`` guard. Spawn re-imports the script in every worker: with the guard it works,
without it the run must stop with a message that explains the guard.
"""

import subprocess
import sys
import textwrap

import pytest

SCRIPT_HEAD = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    from torch.utils.data import Dataset, TensorDataset

    import mptrain


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(6, 16)
            self.out = nn.Linear(16, 3)

        def forward(self, x):
            return self.out(torch.tanh(self.hidden(x)))


    class Pairs(Dataset):
        def __init__(self, inputs, targets):
            self.inputs, self.targets = inputs, targets

        def __len__(self):
            return len(self.inputs)

        def __getitem__(self, index):
            return self.inputs[index], int(self.targets[index])


    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(256, 6, generator=generator)
    targets = (inputs @ torch.randn(6, 3, generator=generator)).argmax(dim=1)
    train_set = TensorDataset(inputs[:192], targets[:192])
    test_set = Pairs(inputs[192:], targets[192:])


    def main():
        result = mptrain.fit(Net(), train_set, test_set, strategy="hogwild", workers=2,
                             epochs=1, batch_size=16, lr=0.1, threads_per_worker=1,
                             start_method=START_METHOD)
        print(f"ACCURACY {result.test_accuracy:.4f}")

""")

GUARDED = 'if __name__ == "__main__":\n    main()\n'
UNGUARDED = "main()\n"
# Mentions __name__ without guarding anything, so only the workers can notice the mistake.
UNGUARDED_MENTIONING_NAME = 'print("running as", __name__)\nmain()\n'


def run_script(tmp_path, start_method, tail):
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT_HEAD.replace("START_METHOD", repr(start_method)) + "\n" + tail)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    return done, done.stdout + done.stderr


def accuracy_of(output):
    line = next(line for line in output.splitlines() if line.startswith("ACCURACY "))
    return float(line.split()[1])


@pytest.mark.timeout(150)
@pytest.mark.parametrize("start_method, tail", [
    ("fork", GUARDED),
    ("fork", UNGUARDED),
    pytest.param("spawn", GUARDED, marks=pytest.mark.slow),
], ids=["fork-guarded", "fork-unguarded", "spawn-guarded"])
def test_model_and_data_defined_in_main_train(tmp_path, start_method, tail):
    done, output = run_script(tmp_path, start_method, tail)
    assert done.returncode == 0, output
    assert 0.0 <= accuracy_of(output) <= 1.0


@pytest.mark.timeout(150)
def test_spawn_without_guard_is_refused_with_an_explanation(tmp_path):
    done, output = run_script(tmp_path, "spawn", UNGUARDED)
    assert done.returncode != 0
    assert "ACCURACY" not in output
    assert 'if __name__ == "__main__"' in output  # mptrain's own check, before any worker
    assert "spawn" in output


@pytest.fixture(scope="module")
def spawned_unguarded_run(tmp_path_factory):
    """One spawn run of the unguarded script that mentions ``__name__``, read by the two
    tests below: each checks another part of what it printed."""
    return run_script(tmp_path_factory.mktemp("unguarded"), "spawn", UNGUARDED_MENTIONING_NAME)


#: The two readers of ``spawned_unguarded_run`` run in one xdist worker: a module fixture is
#: made once per worker, and the suite's two workers each ran the spawn run (19 s apiece).
ONE_SPAWN_RUN = pytest.mark.xdist_group("api-main-unguarded-spawn")


@ONE_SPAWN_RUN
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_spawn_without_guard_fails_in_the_workers_with_an_explanation(spawned_unguarded_run):
    done, output = spawned_unguarded_run
    assert done.returncode != 0
    assert "ACCURACY" not in output
    assert "running as __mp_main__" in output  # the workers re-imported the script
    assert "WorkerFailedError" in output


@ONE_SPAWN_RUN
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_spawn_without_guard_is_explained_by_mptrain_in_the_workers(spawned_unguarded_run):
    done, output = spawned_unguarded_run
    assert done.returncode != 0
    assert "re-imports your main script in every worker" in output
