"""Under torchrun only rank 0 logs: one TensorBoard event file, one CSV, for the job."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("tensorboard")

NETWORK_TROUBLE = re.compile(r".*(RendezvousConnectionError|RendezvousTimeoutError|"
                             r"DistNetworkError|Address already in use|Network is unreachable|"
                             r"Cannot assign requested address|Connection refused).*")
LAUNCHER = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_only_rank_0_logs(tmp_path):
    from tracker_readers import tb_scalars

    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", "-m", "mptrain", "run", "--data", "linreg",
               "--epochs", "2", "--quiet", "--strategy", "sync", "--out", str(out),
               "--logger", "tensorboard,csv"]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    if done.returncode != 0 and NETWORK_TROUBLE.search(done.stderr):
        pytest.skip("torchrun's rendezvous cannot work in this sandbox")
    assert done.returncode == 0, done.stderr
    assert len(list((out / "tb").glob("events.out.tfevents.*"))) == 1
    assert [s for s, _ in tb_scalars(out / "tb")["train_loss"]] == [1, 2]
    assert len((out / "metrics.csv").read_text().splitlines()) == 3
