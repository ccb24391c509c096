"""A Python caller is told about its settings as it wrote them (``workers``, ``batch_size``),
never as the command line's flags (``--workers``, ``--batch-size``) that it would have to
translate back; the command line keeps its flags.

Each message is raised twice where the raising function can be called on its own: inside
``spelled(as_keyword)`` (what ``fit()`` and ``rl.fit()`` open around a run) it names the
keyword, outside it the flag. A few go through ``fit()`` / ``rl.fit()`` themselves, to show
the spelling reaches that far (the checkpoint is loaded, and an RL run built, inside it)."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain
from mptrain.config import TrainConfig
from mptrain.errors import (RunInterrupted, TrainingDiverged, UserError, WorkerFailedError,
                            as_keyword, spelled)

#: torchrun's own flags, which a message may name whoever calls (they are not ours).
TORCHRUN_FLAGS = ("--nproc-per-node", "--nnodes", "--max-restarts")


def ours_named_as_keywords(text: str) -> bool:
    """No flag of ours in ``text`` (torchrun's may stay: they are torchrun's spelling)."""
    for flag in TORCHRUN_FLAGS:
        text = text.replace(flag, "")
    return "--" not in text


def classified(samples: int = 64, features: int = 4):
    inputs = torch.randn(samples, features, generator=torch.Generator().manual_seed(0))
    return TensorDataset(inputs, (inputs[:, 0] > 0).long())


# -- refusals and notes raised by one function: keyword inside spelled(), flag outside ------


def _config(**settings):
    return TrainConfig(**settings)


def _strategy_unknown():
    from mptrain.config import strategy_class

    strategy_class("hogwlid")


def _accountant_unknown():
    from mptrain.federated.accounting import PrivacyAccountant

    PrivacyAccountant("renyi")


def _server_optimizer_unknown():
    from mptrain.federated.server_opt import build_server_optimizer

    build_server_optimizer("adamw")


def _partition(spec, clients, targets=None):
    from mptrain.data.partitions import partition_clients

    targets = torch.arange(10) % 2 if targets is None else targets
    return lambda: partition_clients(spec, targets, clients, seed=0)


def _user_code_again():
    from mptrain.checkpoint import Checkpoint, user_code_in

    stored = Checkpoint(epoch=1, strategy="fedavg", config={"partition": "mine:split"},
                        run={}, model={}, ranks=[], metrics=[])
    user_code_in(stored, {"partition": None})


def _resume_other_workers():
    from mptrain.checkpoint import check_resumable

    stored = SimpleNamespace(strategy="sync", world_size=2)
    check_resumable(stored, SimpleNamespace(strategy="sync"), 3,
                    SimpleNamespace(resumes_on_other_worker_counts=False))


def _resume_other_strategy():
    from mptrain.checkpoint import check_resumable

    check_resumable(SimpleNamespace(strategy="ddp", world_size=2),
                    SimpleNamespace(strategy="sync"), 2, None)


def _dp_with_compile():
    from mptrain.strategies.data_parallel_gpus import DataParallelGPUsStrategy

    DataParallelGPUsStrategy.check_config(SimpleNamespace(compile=True))


def _dp_on_cpu():
    from mptrain.strategies.data_parallel_gpus import DataParallelGPUsStrategy

    DataParallelGPUsStrategy.check_config(SimpleNamespace(compile=False, device="cpu"))


def _dp_without_gpus(monkeypatch):
    from mptrain.strategies import data_parallel_gpus

    monkeypatch.setattr(data_parallel_gpus, "visible_gpus", lambda: 0)
    data_parallel_gpus.DataParallelGPUsStrategy.check_config(
        SimpleNamespace(compile=False, device="cuda"))


def _dp_too_many_workers(monkeypatch):
    from mptrain.strategies import data_parallel_gpus

    monkeypatch.setattr(data_parallel_gpus, "visible_gpus", lambda: 2)
    data_parallel_gpus.DataParallelGPUsStrategy.check_config(
        SimpleNamespace(compile=False, device="cuda", workers=4))


def _ddp_nccl_short_of_gpus(monkeypatch):
    from mptrain.strategies import ddp

    monkeypatch.setattr(ddp, "visible_gpus", lambda: 1)
    ddp.DDPStrategy.comm_kind(SimpleNamespace(device="cuda", ddp_backend="nccl", workers=2),
                              None)


def _no_cuda(monkeypatch):
    from mptrain.launch import preflight

    monkeypatch.setattr(preflight.torch.cuda, "device_count", lambda: 0)
    preflight.check_device("cuda")


def _fork_with_cuda():
    from mptrain.launch.start_method import choose_start_method

    choose_start_method("fork", "cuda", 1)


def _fork_with_threads(monkeypatch):
    from mptrain.launch import start_method

    monkeypatch.setattr(start_method, "check_fork_safe", lambda: None)
    monkeypatch.setattr(start_method.openmp, "can_fork_multithreaded_children", lambda: False)
    start_method.choose_start_method("fork", "cpu", 2)


def _fork_unsafe(monkeypatch):
    from mptrain.launch import start_method

    monkeypatch.setattr(start_method.torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(start_method, "fork_unsafe_reason", lambda: "a thread is running")
    start_method.check_fork_safe()


def _fork_after_cuda(monkeypatch):
    from mptrain.launch import start_method

    monkeypatch.setattr(start_method.torch.cuda, "is_initialized", lambda: True)
    start_method.check_fork_safe()


def _file_descriptors_short(monkeypatch):
    from mptrain.launch import sharing

    monkeypatch.setattr(sharing, "raise_open_file_limit", lambda: (1024, 1024))
    sharing.choose_sharing_strategy("file_descriptor", 10**6)


def _under_torchrun(monkeypatch):
    from mptrain.launch import launchers
    from mptrain.launch.world import ExternalWorld
    from mptrain.strategies.registry import strategy_class

    monkeypatch.setattr(launchers, "detect_external_world",
                        lambda: ExternalWorld(rank=0, world_size=2, local_rank=0))
    launchers.choose_launcher(strategy_class("hogwild"))


def _owned_by_torchrun(name):
    def refuse():
        from mptrain.launch.launchers import TorchrunLauncher
        from mptrain.launch.world import ExternalWorld

        TorchrunLauncher(ExternalWorld(rank=0, world_size=2, local_rank=0)) \
            .refuse_settings({name: 2})
    return refuse


def _scaffold_without_room(monkeypatch, tmp_path):
    from mptrain.strategies.fedavg import shared

    monkeypatch.setattr(shared, "free_bytes", lambda path: 0)
    config = SimpleNamespace(fedavg=SimpleNamespace(clients=100))
    shared.controls_placement(config, nn.Linear(100, 100), tmp_path)


def _tracker_place(module, cls, monkeypatch):
    from importlib import import_module

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    getattr(import_module(f"mptrain.trackers.{module}"), cls).check_place(None, None)


def _trackers(names, tb_dir=None):
    from mptrain.trackers import make_trackers

    return lambda: make_trackers(names, None, tb_dir=tb_dir, enabled=False)


REFUSALS = {
    # id: (what raises -- given monkeypatch and tmp_path where it takes them, the keywords
    # its message names from Python, the flags from the command line)
    "ddp-backend-on-cpu": (lambda: _config(strategy="ddp", ddp_backend="nccl"),
                           "ddp_backend nccl needs device cuda; on CPU use ddp_backend auto",
                           "--ddp-backend nccl needs --device cuda"),
    "unknown-strategy": (_strategy_unknown, "unknown strategy 'hogwlid'",
                         "unknown --strategy 'hogwlid'"),
    "unknown-accountant": (_accountant_unknown, "unknown accountant 'renyi'",
                           "unknown --accountant 'renyi'"),
    "unknown-server-optimizer": (_server_optimizer_unknown,
                                 "unknown server_optimizer 'adamw'",
                                 "unknown --server-optimizer 'adamw'"),
    "partition-iid-parameter": (_partition("iid:2", 2), "partition 'iid:2': iid takes no",
                                "--partition 'iid:2'"),
    "partition-malformed": (_partition("dirichlet:1:2:3", 2), "partition 'dirichlet:1:2:3' "
                            "is malformed", "--partition 'dirichlet:1:2:3' is malformed"),
    "partition-shards-malformed": (_partition("shards:", 2), "partition 'shards:' is "
                                   "malformed", "--partition 'shards:' is malformed"),
    "partition-alpha": (_partition("dirichlet:-1", 2), "partition 'dirichlet:-1': ALPHA",
                        "--partition 'dirichlet:-1': ALPHA"),
    "partition-whole": (_partition("shards:0", 2), "partition 'shards:0': shards:K needs K",
                        "--partition 'shards:0'"),
    "clients-not-whole": (_partition("iid", 0), "clients must be a whole number",
                          "--clients must be a whole number"),
    "clients-over-samples": (_partition("iid", 11), "clients 11 is more than the 10 "
                             "training samples; lower clients", "lower --clients so"),
    "dirichlet-minimum": (_partition("dirichlet:0.5:3", 4), "partition dirichlet:0.5:3: 4 "
                          "clients of at least 3 samples need 12, but there are 10; lower "
                          "MIN or clients", "lower MIN or --clients"),
    "shards-too-many": (_partition("shards:3", 4), "partition shards:3 with clients 4 needs "
                        "12 shards but there are only 10 samples; lower K or clients",
                        "--partition shards:3 with --clients 4"),
    "partition-needs-labels": (_partition("dirichlet:0.5", 2, torch.rand(10)),
                               "partition dirichlet:0.5 needs class labels",
                               "--partition dirichlet:0.5 needs class labels"),
    "user-partition-import": (_partition("no_such_module_here:split", 2),
                              "partition 'no_such_module_here:split'",
                              "--partition 'no_such_module_here:split'"),
    "user-code-again": (_user_code_again, "the checkpoint names your code partition "
                        "'mine:split'; a checkpoint never chooses code to run: give partition",
                        "give --partition 'mine:split' again"),
    "resume-other-workers": (_resume_other_workers, "resume with workers 2",
                             "resume with --workers 2"),
    "resume-other-strategy": (_resume_other_strategy, "resume with strategy ddp",
                              "resume with --strategy ddp"),
    "dp-compile": (_dp_with_compile, "compile does not work with strategy 'dp'", "use "
                   "--strategy ddp --compile"),
    "dp-on-cpu": (_dp_on_cpu, "needs device cuda; on CPU use strategy ddp or sync",
                  "needs --device cuda; on CPU use --strategy ddp"),
    "dp-without-gpus": (_dp_without_gpus, "on CPU use strategy ddp or sync",
                        "on CPU use --strategy ddp or sync"),
    "dp-too-many-workers": (_dp_too_many_workers, "strategy 'dp' over workers 4 GPUs, but 2 "
                            "are visible; use workers 2 or fewer", "use --workers 2"),
    "ddp-nccl-gpus": (_ddp_nccl_short_of_gpus, "ddp_backend nccl needs a GPU per worker, but "
                      "workers is 2 and 1 GPU(s) are visible; use workers 1 or ddp_backend "
                      "auto", "use --workers 1 or --ddp-backend auto"),
    "no-cuda": (_no_cuda, "device cuda was asked for but no CUDA device is visible; use device "
                "cpu", "--device cuda was asked for"),
    "fork-with-cuda": (_fork_with_cuda, "start_method fork cannot be used with device cuda",
                       "--start-method fork cannot be used with --device cuda"),
    "fork-with-threads": (_fork_with_threads, "use threads_per_worker 1 or start_method "
                          "forkserver", "use --threads-per-worker 1 or --start-method"),
    "fork-unsafe": (_fork_unsafe, "start_method fork cannot be used here: a thread is running; "
                    "use start_method forkserver", "use --start-method forkserver"),
    "fork-after-cuda": (_fork_after_cuda, "use start_method spawn", "use --start-method spawn"),
    "file-descriptors": (_file_descriptors_short, "sharing_strategy file_descriptor needs "
                         "about", "use --sharing-strategy auto"),
    "strategy-under-torchrun": (_under_torchrun, "use strategy ddp or sync",
                                "use --strategy ddp or sync"),
    "workers-under-torchrun": (_owned_by_torchrun("workers"), "workers does nothing under "
                               "torchrun", "--workers does nothing under torchrun"),
    "restarts-under-torchrun": (_owned_by_torchrun("max_restarts"), "max_restarts does nothing "
                                "under torchrun, which starts the processes itself; use "
                                "--max-restarts of torchrun; mptrain then resumes from the "
                                "last checkpoint in out by itself", "checkpoint in --out by"),
    "scaffold-without-room": (_scaffold_without_room, "MiB free under out; give out on a disk "
                              "with room, or fewer clients", "give --out on a disk with room, "
                              "or fewer --clients"),
    "csv-without-out": (lambda mp: _tracker_place("to_csv", "CsvTracker", mp),
                        "loggers csv needs out DIR", "--logger csv needs --out DIR"),
    "tensorboard-without-out": (
        lambda mp: _tracker_place("to_tensorboard", "TensorBoardTracker", mp),
        "loggers tensorboard needs out DIR (events go to DIR/tb/) or tb_dir DIR",
        "--logger tensorboard needs --out DIR (events go to DIR/tb/) or --tb-dir DIR"),
    "mlflow-without-out": (lambda mp: _tracker_place("to_mlflow", "MlflowTracker", mp),
                           "loggers mlflow needs out DIR", "--logger mlflow needs --out DIR"),
    "unknown-logger": (_trackers("tensorbored"), "unknown loggers 'tensorbored'",
                       "unknown --logger 'tensorbored'"),
    "logger-not-names": (_trackers(7), "loggers takes tracker names",
                         "--logger takes tracker names"),
    "tb-dir-alone": (_trackers(None, tb_dir="tb"), "tb_dir does nothing without loggers "
                     "tensorboard; add it or leave tb_dir out",
                     "--tb-dir does nothing without --logger tensorboard"),
}


def _call(raise_it, monkeypatch, tmp_path):
    import inspect

    wanted = list(inspect.signature(raise_it).parameters)
    given = {"monkeypatch": monkeypatch, "mp": monkeypatch, "tmp_path": tmp_path}
    with pytest.raises(UserError) as caught:
        raise_it(*[given[name] for name in wanted])
    return str(caught.value)


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusal_names_keywords_to_python_and_flags_to_the_command_line(
        case, monkeypatch, tmp_path):
    raise_it, from_python, from_flags = REFUSALS[case]
    with spelled(as_keyword):
        message = _call(raise_it, monkeypatch, tmp_path)
    assert from_python in message and ours_named_as_keywords(message), message
    message = _call(raise_it, monkeypatch, tmp_path)
    assert from_flags in message, message


def _compile_without_compiler(monkeypatch):
    from mptrain.engine import compiling

    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    return compiling.compile_refusal("cpu")


def _compile_without_triton(monkeypatch):
    import torch.utils._triton as triton
    from mptrain.engine import compiling

    monkeypatch.setattr(triton, "has_triton", lambda: False)
    return compiling.compile_refusal("cuda")


def _bf16_emulated(monkeypatch):
    from mptrain.engine.precision import precision_warnings

    return " ".join(precision_warnings("bf16", "cpu",
                                       "processor\t: 0\nflags\t\t: fpu sse2 avx avx2\n"))


def _tracker_failed(monkeypatch):
    from mptrain.callbacks import describe_failure

    return describe_failure(SimpleNamespace(name="wandb"), "on_round", OSError("disk full"))


def _hung_worker(monkeypatch):
    from mptrain.launch.supervisor import WorkerFailure

    return WorkerFailure(rank=1, pid=123, reason="hung", timeout_s=60).describe()


def _privacy_stop_in_summary(monkeypatch):
    from mptrain.report.summary import result_lines

    return " ".join(result_lines({"wall_s": 1.0, "epsilon": 1.5, "dp_delta": 1e-5,
                                  "stopped_for_privacy_at_round": 3, "target_epsilon": 2.0},
                                 None))


def _fedavg_round_notes(monkeypatch):
    from mptrain.strategies.fedavg.report import round_notes

    config = SimpleNamespace(fedavg=SimpleNamespace(target_epsilon=2.0))
    metrics = SimpleNamespace(epoch=3, extras={"failed_clients": [5], "stopped": True,
                                               "epsilon": 1.9})
    return " ".join(round_notes(config, metrics))


def _fedavg_banner(monkeypatch):
    from mptrain.strategies.fedavg import report

    monkeypatch.setattr(report, "uses_shared_table", lambda *args: False)
    config = TrainConfig(strategy="fedavg", clients=12, clients_per_round=10,
                         malicious_fraction=0.25, attack="sign-flip")
    plan = SimpleNamespace(comm=SimpleNamespace(shares_memory=True))
    return " ".join(report.describe(config, plan, nn.Linear(4, 2), None))


NOTES = {
    # id: (what returns the text, what it says from Python, and from the command line)
    "compile-without-compiler": (_compile_without_compiler, "train without compile",
                                 "train without --compile"),
    "compile-without-triton": (_compile_without_triton, "without compile",
                               "without --compile"),
    "bf16-emulated": (_bf16_emulated, "precision bf16 on a CPU without AVX512-BF16 or AMX: "
                      "torch emulates bfloat16 and a step is several times slower than with "
                      "precision 32", "--precision bf16 on a CPU"),
    "tracker-failed": (_tracker_failed, "loggers wandb failed (on_round: OSError: disk full)",
                       "--logger wandb failed"),
    "hung-worker": (_hung_worker, "(raise worker_timeout if a step can really take that long)",
                    "(raise --worker-timeout if"),
    "privacy-stop": (_privacy_stop_in_summary, "stopped after round 3, before target_epsilon 2",
                     "before --target-epsilon 2"),
    "fedavg-round-notes": (_fedavg_round_notes, "dropped failing client(s) 5 (accept_failures)"
                           " round 3: stopped: the next round would spend more than "
                           "target_epsilon 2", "(--accept-failures)"),
    "fedavg-banner": (_fedavg_banner, "so the last bits depend on workers", "depend on "
                      "--workers"),
    "fedavg-banner-attack": (_fedavg_banner, "clients (malicious_fraction 0.25, fixed by the "
                             "seed)", "(--malicious-fraction 0.25"),
}


@pytest.mark.parametrize("case", sorted(NOTES))
def test_a_note_names_keywords_to_python_and_flags_to_the_command_line(case, monkeypatch):
    say, from_python, from_flags = NOTES[case]
    with spelled(as_keyword):
        text = say(monkeypatch)
    assert text is not None and from_python in text and "--" not in text, text
    assert from_flags in say(monkeypatch)


# -- through fit() and rl.fit() themselves ---------------------------------------------------


class Interrupting(nn.Linear):
    """Raises KeyboardInterrupt (what Ctrl-C raises) at its first training step; the
    parent's shape check (eval mode) passes."""

    def forward(self, x):
        if self.training:
            raise KeyboardInterrupt
        return super().forward(x)


def test_fit_is_told_its_keywords_when_a_strategy_ignores_a_setting():
    # fit() was told 'rounds does nothing with strategy ddp; use --epochs'.
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), classified(), strategy="ddp", rounds=3)
    assert "use epochs" in str(caught.value) and "--" not in str(caught.value)
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), classified(), strategy="fedavg", epochs=3)
    assert "use rounds" in str(caught.value) and "--" not in str(caught.value)
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), classified(), strategy="fedavg", steps_per_epoch=3)
    assert "use rounds with fewer clients_per_round" in str(caught.value)
    assert "--" not in str(caught.value)


def test_fit_is_told_its_keywords_by_the_single_strategy():
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), classified(), strategy="single", workers=2)
    message = str(caught.value)
    assert "workers is 2; use strategy hogwild|sync|ddp" in message and "--" not in message


@pytest.mark.parametrize("saved, words", [
    (None, "give resume the out folder of a run that used checkpoint_every"),
    ({"something": "else"}, "point resume at a folder written by a run with checkpoint_every"),
])
def test_fit_is_told_its_keywords_about_a_folder_without_a_checkpoint(tmp_path, saved, words):
    # resolve_resume ran before fit() opened its spelling: '--resume the --out folder'.
    if saved is not None:
        torch.save(saved, tmp_path / "checkpoint.pt")
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), classified(), resume=tmp_path)
    message = str(caught.value)
    assert words in message and "--" not in message


def test_fit_is_told_its_keywords_about_out_and_loggers(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), classified(), strategy="single", epochs=1,
                    out=tmp_path / "a-file")
    assert "out " in str(caught.value) and "--" not in str(caught.value)
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 2), classified(), strategy="single", epochs=1, loggers="csv")
    assert str(caught.value) == ("loggers csv needs out DIR (metrics.csv goes next to "
                                 "metrics.jsonl)")


def test_fit_is_told_its_keywords_when_a_partition_needs_labels():
    inputs = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
    regression = TensorDataset(inputs, inputs[:, :1])
    with pytest.raises(UserError) as caught:
        mptrain.fit(nn.Linear(4, 1), regression, strategy="fedavg", workers=1, clients=4,
                    clients_per_round=2, rounds=1, partition="dirichlet:0.5")
    message = str(caught.value)
    assert "partition dirichlet:0.5 needs class labels" in message and "--" not in message


def test_fit_is_told_its_keywords_when_training_diverges():
    inputs = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(TrainingDiverged) as caught:
        mptrain.fit(nn.Linear(4, 1), TensorDataset(inputs, 1e30 * inputs[:, :1]),
                    strategy="single", epochs=2, lr=1e30)
    assert str(caught.value).endswith("try a lower lr"), str(caught.value)


def test_fit_is_told_its_keywords_when_stopped_without_a_checkpoint():
    with pytest.raises(RunInterrupted) as caught:
        mptrain.fit(Interrupting(4, 2), classified(), strategy="single", epochs=1)
    assert caught.value.exit_code == 128 + signal.SIGINT
    message = str(caught.value)
    assert "(use out DIR checkpoint_every 1 to be able to resume)" in message
    assert "--" not in message


def _wrong_net(obs_dim, n_actions):
    return nn.Linear(obs_dim, n_actions + 1)


@pytest.mark.parametrize("settings, words", [
    (dict(env="NoSuchEnvironment-v0"), "env 'NoSuchEnvironment-v0': "),
    (dict(net="no_such_module_here:make"), "net 'no_such_module_here:make': cannot import"),
    (dict(net=f"{__file__}:_wrong_net"), "for algo a3c; for a batch of 2 observations"),
])
def test_rl_fit_is_told_its_keywords(settings, words):
    pytest.importorskip("gymnasium")
    from mptrain.rl import fit

    with pytest.raises(UserError) as caught:
        fit(**{"env": "CartPole-v1", "algo": "a3c", "workers": 1, "steps": 10,
                          **settings})
    message = str(caught.value)
    assert words in message and "--" not in message, message


class FailsToTrain(nn.Linear):
    """Raises at its first training step (in a worker); the parent's shape check, in eval
    mode, passes."""

    def forward(self, x):
        if self.training:
            raise ValueError("cannot train")
        return super().forward(x)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_worker_started_afresh_names_keywords_to_fit(start_method):
    # A spawned worker does not inherit the parent's context: it said '--accept-failures'.
    with pytest.raises(WorkerFailedError) as caught:
        mptrain.fit(FailsToTrain(4, 2), classified(), strategy="fedavg", workers=2, rounds=1,
                    clients=4, clients_per_round=2, start_method=start_method)
    message = str(caught.value)
    assert "(accept_failures drops failing clients from their round instead)" in message
    assert "--accept-failures" not in message


class InterruptedLater(nn.Linear):
    """Raises KeyboardInterrupt at its ``at``-th training step (strategy single trains in
    this process, so the count is this object's)."""

    def __init__(self, at: int):
        super().__init__(4, 2)
        self.at, self.steps = at, 0

    def forward(self, x):
        if self.training:
            self.steps += 1
            if self.steps == self.at:
                raise KeyboardInterrupt
        return super().forward(x)


def test_fit_is_told_to_resume_with_its_own_call_not_a_command_line(tmp_path):
    # It was told 'resume with: mptrain run --resume DIR', a command that cannot name the
    # model and data of a Python call.
    with pytest.raises(RunInterrupted) as caught:
        mptrain.fit(InterruptedLater(at=3), classified(), strategy="single", epochs=3,
                    batch_size=32, out=tmp_path, checkpoint_every=1)
    message = str(caught.value)
    assert message.endswith(f"resume with: the same call with resume={str(tmp_path)!r}")
    assert "--" not in message
    resumed = mptrain.fit(nn.Linear(4, 2), classified(), resume=tmp_path, batch_size=32)
    assert len(resumed.rounds) == 3


@pytest.mark.timeout(30)
def test_a_collective_timeout_names_worker_timeout_as_the_caller_wrote_it():
    from mptrain.comm.base import CollectiveTimeout
    from mptrain.comm.shm import ShmGroupState

    state = ShmGroupState.create(2, 4, torch.float32, 0.2, oversubscribed=False)
    group = state.attach(0)   # rank 1 never comes
    try:
        with spelled(as_keyword), pytest.raises(CollectiveTimeout) as caught:
            group.barrier()
    finally:
        group.close()
    message = str(caught.value)
    assert "raise worker_timeout if a step really takes that long" in message, message
    assert "--" not in message
