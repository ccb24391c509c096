"""Stress: many more workers than cores, a data set of gigabytes, ten thousand shared tensors
under a low open-file limit. Each case is a real ``mptrain run`` subprocess with a bound on
its time; what is asserted is that it ends cleanly and correctly, never how fast.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
import torch

from mptrain.bench.memory import TreeMemorySampler
from run_watch import poll, shm_entries  # noqa: E402

pytestmark = pytest.mark.slow

SHM = Path("/dev/shm")
GIB = 2**30


def start_cli(folder: Path, args: list[str], name: str, **popen) -> subprocess.Popen:
    # Files, not pipes: torch_shm_manager inherits them and outlives the run by a moment.
    with open(folder / f"{name}.out", "w") as out, open(folder / f"{name}.err", "w") as err:
        return subprocess.Popen([sys.executable, "-m", "mptrain", "run", *args], cwd=folder,
                                stdout=out, stderr=err, start_new_session=True, **popen)


def run_cli(folder: Path, args: list[str], name: str, timeout: float, **popen):
    """Run ``mptrain run ARGS`` to its end; return (exit code, stdout, stderr)."""
    process = start_cli(folder, args, name, **popen)
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait(timeout=30)
    return (process.returncode, (folder / f"{name}.out").read_text(),
            (folder / f"{name}.err").read_text())


def assert_no_new_shm(before: set[str]) -> None:
    # torch_shm_manager unlinks file_system segments a moment after their last user is gone.
    poll(lambda: not (shm_entries() - before), 10)
    assert not (shm_entries() - before), f"left in {SHM}: {sorted(shm_entries() - before)}"


# -- 16 workers on 2 cores ----------------------------------------------------------------

@pytest.mark.timeout(300)
def test_sixteen_sync_workers_on_few_cores_finish_correctly_and_reproducibly(tmp_path):
    shm_before = shm_entries()
    models = []
    for attempt in range(2):
        out = tmp_path / f"run{attempt}"
        code, _, err = run_cli(tmp_path, ["--data", "digits", "--epochs", "1", "--workers",
                                          "16", "--strategy", "sync", "--quiet", "--out",
                                          str(out)], f"run{attempt}", timeout=120)
        assert code == 0, err
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text()
                   .splitlines()]
        # Every sample once, padded (as DistributedSampler) to 16 equal shards of 90.
        assert len(metrics) == 1 and metrics[0]["train_samples"] == 16 * 90
        summary = json.loads((out / "summary.json").read_text())
        assert summary["workers"] == 16 and 0.0 <= summary["test_accuracy"] <= 1.0
        # With more workers than cores, the ranks take turns in a process per core.
        assert summary["processes"] == min(16, len(os.sched_getaffinity(0)))
        models.append(torch.load(out / "model.pt"))
    assert all(torch.isfinite(t).all() for t in models[0].values())
    # Each chunk is averaged by one rank in a fixed order: oversubscription changes timing,
    # never the result.
    for key in models[0]:
        assert torch.equal(models[0][key], models[1][key]), key
    assert_no_new_shm(shm_before)


# -- a data set of 2 GiB ------------------------------------------------------------------

BIG_FACTORY = textwrap.dedent('''
    import multiprocessing
    import os
    import time

    import torch
    import torch.nn as nn
    from torch.utils.data import TensorDataset

    SAMPLES = int(os.environ["BIG_SAMPLES"])


    def make_data():
        inputs = torch.rand(SAMPLES, 1, 8, 8)
        targets = torch.randint(0, 10, (SAMPLES,))
        return TensorDataset(inputs, targets), None


    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(64, 10)
            self.started = False

        def forward(self, x):
            if not self.started and multiprocessing.parent_process() is not None:
                self.started = True
                marks = os.environ["MARK_DIR"]
                open(os.path.join(marks, f"started-{os.getpid()}"), "w").close()
                # Hold the first step until the test has measured every worker alive.
                deadline = time.monotonic() + 120
                while not os.path.exists(os.path.join(marks, "release")):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the test never released the workers")
                    time.sleep(0.01)
            return self.linear(x.flatten(1))


    def make_model():
        return Tiny()
''')


def free_shm_bytes() -> int:
    try:
        stats = os.statvfs(SHM)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize


@pytest.mark.timeout(400)
@pytest.mark.skipif(free_shm_bytes() < 5 * GIB or psutil.virtual_memory().available < 8 * GIB,
                    reason="needs 5 GiB free in /dev/shm and 8 GiB of available memory")
def test_four_workers_hold_a_two_gib_data_set_once(tmp_path):
    samples = 2 * GIB // (64 * 4)                    # float32 [N, 1, 8, 8]: 2 GiB of inputs
    data_bytes = samples * 64 * 4 + samples * 8      # + int64 targets
    factory = tmp_path / "big.py"
    factory.write_text(BIG_FACTORY)
    env = dict(os.environ, BIG_SAMPLES=str(samples), MARK_DIR=str(tmp_path))
    process = start_cli(tmp_path, ["--data", f"{factory}:make_data", "--model",
                                   f"{factory}:make_model", "--strategy", "hogwild",
                                   "--workers", "4", "--epochs", "1", "--steps-per-epoch", "5",
                                   "--quiet"], "big", env=env)
    whole_run = TreeMemorySampler(process.pid, interval_s=0.05)
    whole_run.start()
    training = None
    try:
        started = poll(lambda: len(list(tmp_path.glob("started-*"))) >= 4
                       or process.poll() is not None, 300)
        if started and process.poll() is None:
            # From here on every worker exists and trains: the data must be there once.
            training = TreeMemorySampler(process.pid, interval_s=0.05)
            training.start()
            poll(lambda: training.peak_processes >= 5 or process.poll() is not None, 60)
        (tmp_path / "release").touch()
        process.wait(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait(timeout=30)
        whole_run.stop()
        if training is not None:
            training.stop()
    err = (tmp_path / "big.err").read_text()
    assert process.returncode == 0, err
    assert training is not None and training.peak_processes >= 5  # parent + 4 workers seen
    print(f"data {data_bytes / GIB:.2f} GiB; peak PSS while training "
          f"{training.peak_pss / GIB:.2f} GiB (RSS {training.peak_rss / GIB:.2f}); whole run "
          f"{whole_run.peak_pss / GIB:.2f} GiB")
    assert training.peak_pss < 1.5 * data_bytes
    # During set-up the parent holds the factory's tensors and their shared-memory copy for a
    # moment (Tensor.share_memory_ copies): one extra copy, never one per worker.
    assert whole_run.peak_pss < 2.5 * data_bytes


# -- 10,000 shared tensors under a low open-file limit ------------------------------------

MANY_FACTORY = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class ManyTensors(nn.Module):
        def __init__(self, count=10_000):
            super().__init__()
            self.linear = nn.Linear(64, 10)
            self.scalars = nn.ParameterList(nn.Parameter(torch.zeros(())) for _ in range(count))

        def forward(self, x):
            return self.linear(x.flatten(1)) + (self.scalars[0] + self.scalars[1]
                                                + self.scalars[-1])


    def make_model():
        return ManyTensors()
''')


def low_open_file_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def run_many_tensors(tmp_path: Path, sharing: str, quiet: bool):
    factory = tmp_path / "many.py"
    factory.write_text(MANY_FACTORY)
    args = ["--data", "digits", "--model", f"{factory}:make_model", "--strategy", "hogwild",
            "--workers", "2", "--epochs", "1", "--sharing-strategy", sharing]
    return run_cli(tmp_path, args + (["--quiet"] if quiet else []), sharing, timeout=240,
                   preexec_fn=low_open_file_limit)


@pytest.mark.timeout(300)
def test_ten_thousand_tensors_under_a_low_open_file_limit_use_file_system(tmp_path):
    shm_before = shm_entries()
    code, out, err = run_many_tensors(tmp_path, "auto", quiet=False)
    assert code == 0, err
    assert "sharing strategy file_system" in out, out
    assert "Traceback" not in err, err
    assert_no_new_shm(shm_before)  # 10,000 named segments, all unlinked again


def limits_under(preexec_fn) -> tuple[int, int]:
    """The open-file limits (soft, hard) that a child started with ``preexec_fn`` has."""
    probe = subprocess.run([sys.executable, "-c", "import resource; "
                            "print(*resource.getrlimit(resource.RLIMIT_NOFILE))"],
                           preexec_fn=preexec_fn, capture_output=True, text=True, check=True)
    soft, hard = map(int, probe.stdout.split())
    return soft, hard


@pytest.mark.timeout(300)
def test_ten_thousand_tensors_with_file_descriptor_fail_in_one_clear_line_or_finish(tmp_path):
    # file_descriptor keeps one descriptor per shared tensor open in every process; mptrain
    # can raise the soft limit only up to the hard one. So the configured hard limit decides
    # which outcome must happen: refused up front when the tensors cannot fit, else a run.
    _, hard = limits_under(low_open_file_limit)
    tensors = 10_000 + 2  # ManyTensors: its scalars and the linear layer's weight and bias
    must_refuse = hard != resource.RLIM_INFINITY and tensors > hard
    shm_before = shm_entries()
    code, out, err = run_many_tensors(tmp_path, "file_descriptor", quiet=True)
    assert_no_new_shm(shm_before)
    assert "Traceback" not in err, err
    if must_refuse:
        lines = err.strip().splitlines()
        assert code == 2, err  # a setting the user can change, like every UserError
        assert len(lines) == 1 and lines[0].startswith("mptrain: error:"), err
        assert "open" in lines[0] and "file_system" in lines[0], err
        assert f"the limit is {hard}" in lines[0], err
        assert out == "", out  # refused before the banner: nothing started
    else:
        assert code == 0, err
