"""Ranks from torchrun: ``torchrun --standalone --nproc-per-node 2 -m mptrain run`` on CPU
trains with 2 workers (gloo) as mptrain's own 2 workers do, and mptrain's own process settings
are refused under it in one line with exit code 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

RUN = ["run", "--data", "linreg", "--epochs", "2", "--quiet"]
# What torchrun or the gloo rendezvous print when the sandbox has no usable loopback network;
# anything else that fails is a failure of mptrain and must show as one.
NETWORK_TROUBLE = re.compile(r".*(RendezvousConnectionError|RendezvousTimeoutError|"
                             r"DistNetworkError|Address already in use|Network is unreachable|"
                             r"Cannot assign requested address|Connection refused).*")


def clean_environment() -> dict[str, str]:
    """This process's environment without a launcher's variables (pytest may itself run
    under one)."""
    launcher = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}
    return {k: v for k, v in os.environ.items() if k not in launcher}


def torchrun(folder: Path, args: list[str], *launcher_args: str, timeout: float = 150):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", *launcher_args, "-m", "mptrain", *args]
    done = subprocess.run(command, cwd=folder, env=clean_environment(), capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        trouble = NETWORK_TROUBLE.search(done.stderr)
        if trouble:
            pytest.skip(f"torchrun's rendezvous cannot work in this sandbox: "
                        f"{trouble.group(0).strip()}")
    return done


def mptrain_run(folder: Path, args: list[str], env: dict[str, str] | None = None,
                timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "mptrain", *args], cwd=folder,
                          env={**clean_environment(), **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)


def own_workers_run(folder: Path, args: list[str], monkeypatch) -> int:
    """``mptrain ARGS`` with mptrain's own workers, run in this process (``main`` as the
    script calls it) in ``folder``: the reference that torchrun's ranks are compared with
    needs no interpreter of its own, and its workers are forked and reaped by the run."""
    from mptrain.cli import main

    for name in set(os.environ) - set(clean_environment()):
        monkeypatch.delenv(name)
    monkeypatch.chdir(folder)
    try:
        return main(args)
    except SystemExit as exit_:
        return exit_.code


@pytest.mark.slow
@pytest.mark.timeout(300)
# One strategy: what differs between strategies under torchrun is covered across nodes by
# test_multinode (sync, ddp and fedavg); this is the one-node path.
@pytest.mark.parametrize("strategy", ["ddp"])
def test_two_ranks_from_torchrun_train_like_two_own_workers(tmp_path, strategy, monkeypatch):
    out, own = tmp_path / "torchrun", tmp_path / "own"
    done = torchrun(tmp_path, RUN + ["--strategy", strategy, "--out", str(out)])
    assert done.returncode == 0, done.stderr

    summary = json.loads((out / "summary.json").read_text())
    assert (summary["workers"], summary["strategy"], summary["epochs"]) == (2, strategy, 2)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2]
    assert all(row["train_samples"] == summary["train_samples"] for row in rows)  # all of it
    # Only rank 0 writes: one set of outputs, nothing half-written beside them.
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []

    # The same run on mptrain's own 2 workers: the same shards, steps and averages; gloo
    # may sum in another order than the shared-memory group, so close, not bitwise.
    assert own_workers_run(tmp_path, RUN + ["--strategy", strategy, "--workers", "2",
                                            "--out", str(own)], monkeypatch) == 0
    theirs, ours = torch.load(out / "model.pt"), torch.load(own / "model.pt")
    assert theirs.keys() == ours.keys()
    for key in ours:
        assert torch.allclose(theirs[key], ours[key], rtol=0, atol=1e-5), key


REFUSED = [
    (["--workers", "2"], "--workers does nothing under torchrun"),
    (["--start-method", "spawn"], "--start-method does nothing under torchrun"),
    (["--sharing-strategy", "file_system"], "--sharing-strategy does nothing under torchrun"),
    (["--max-restarts", "2"], "--max-restarts does nothing under torchrun"),
]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_workers_under_torchrun_are_refused_in_one_line(tmp_path):
    logs = tmp_path / "logs"
    done = torchrun(tmp_path, RUN + ["--strategy", "sync", "--workers", "2", "--out",
                                     str(tmp_path / "out")],
                    "--log-dir", str(logs), "--redirects", "3")
    # torchrun itself reports a failed child (its own exit code and report); the ranks'
    # own output, kept per rank under --log-dir, is mptrain's.
    assert done.returncode != 0
    assert re.search(r"exitcode\s*:\s*2\b", done.stderr), done.stderr
    rank_errors = [path.read_text() for path in sorted(logs.rglob("stderr.log"))]
    assert len(rank_errors) == 2, sorted(logs.rglob("*"))
    # The first rank to refuse makes torchrun stop the other with SIGTERM, which may come
    # before that rank got to refuse: it then says it was stopped. Every rank says one line,
    # and at least one says the refusal.
    refusal = ("mptrain: error: --workers does nothing under torchrun, which starts the "
               "processes itself; use --nproc-per-node (and --nnodes) of torchrun")
    stopped = "mptrain: error: stopped by signal 15; every worker was stopped"
    said = [text.strip().splitlines() for text in rank_errors if text.strip()]
    assert [refusal] in said, rank_errors
    for lines in said:
        assert lines in ([refusal], [stopped]), lines
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flags, words", REFUSED, ids=[flags[0] for flags, _ in REFUSED])
def test_process_settings_in_a_rank_are_refused_in_one_line_with_exit_2(tmp_path, flags,
                                                                        words):
    """One rank as torchrun starts it (its variables set), without torchrun around it: the
    exit code and the whole output are mptrain's."""
    done = mptrain_run(tmp_path, RUN + ["--strategy", "sync", *flags],
                       env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": "1"})  # a port nothing listens on: never reached
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mptrain: error: {words}"), done.stderr
    assert done.stdout == ""


@pytest.mark.timeout(120)
@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_a_rank_asked_for_cuda_without_a_gpu_refuses_before_joining(tmp_path):
    """Before the fix a rank joined an nccl group first: 'Distributed package doesn't have
    NCCL built in', a traceback from every rank."""
    done = mptrain_run(tmp_path, ["run", "--data", "linreg", "--quiet", "--strategy", "fedavg",
                                  "--rounds", "1", "--device", "cuda"],
                       env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": "1"})  # a port nothing listens on: never reached
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "mptrain: error: --device cuda was asked for but no CUDA device is visible; "
        "use --device cpu"], done.stderr
