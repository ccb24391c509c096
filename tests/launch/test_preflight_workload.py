"""``check_workload``: a split that cannot work is refused before any worker starts, in one
line that says what to use instead; the memory estimate leaves the model as it was."""

import re
from types import SimpleNamespace

import psutil
import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import mptrain

from mptrain.data.sources import load_data
from mptrain.errors import UserError
from mptrain.launch import preflight
from mptrain.launch.preflight import WORKER_FLOOR_BYTES, check_workload


def settings(batch_size):
    return SimpleNamespace(batch_size=batch_size)  # all check_workload reads of a TrainConfig


@pytest.fixture(scope="module")
def digits():
    return load_data("digits")


@pytest.fixture
def available(monkeypatch):
    """Set the memory psutil reports as available."""
    def set_available(nbytes):
        memory = psutil.virtual_memory()._replace(available=nbytes)
        monkeypatch.setattr(preflight.psutil, "virtual_memory", lambda: memory)
    return set_available


def test_a_thousand_workers_on_the_digits_are_refused_with_what_to_use(digits):
    # The issue's `mptrain run --strategy sync --workers 1000`: shards of 2 samples.
    samples = len(digits.train)
    with pytest.raises(UserError) as info:
        check_workload(settings(32), digits, 1000, 2)
    message = str(info.value)
    assert "\n" not in message
    assert f"shard of {-(-samples // 1000)} samples, less than one batch of 32" in message
    most = (samples - 1) // 31
    assert f"use --workers {most} or fewer, or --batch-size 2 or less" in message


def test_the_suggested_worker_count_is_the_largest_accepted(digits, available):
    available(2**40)
    most = int(str(pytest.raises(UserError, check_workload, settings(32), digits, 1000, 2)
                   .value).split("--workers ")[1].split()[0])
    check_workload(settings(32), digits, most, 2)
    with pytest.raises(UserError):
        check_workload(settings(32), digits, most + 1, 2)


def test_a_batch_larger_than_the_whole_set_is_told_the_batch_size_only(digits):
    # It said "use --workers 0 or fewer, or --batch-size 719 or less".
    samples = len(digits.train)
    with pytest.raises(UserError) as info:
        check_workload(settings(5000), digits, 2, 2)
    message = str(info.value)
    assert message.endswith(f"use --batch-size {-(-samples // 2)} or less"), message
    assert "--workers" not in message


def test_one_process_may_take_the_whole_set_as_one_batch(digits):
    assert check_workload(settings(10_000), digits, 1, 2) == []


def test_more_workers_than_samples_are_refused(digits):
    with pytest.raises(UserError, match="every worker needs at least one"):
        check_workload(settings(1), digits, len(digits.train) + 1, 2)


def test_workers_that_cannot_fit_in_memory_are_refused(digits, available):
    available(100 * WORKER_FLOOR_BYTES)
    check_workload(settings(1), digits, 100, 2)
    with pytest.raises(UserError) as info:
        check_workload(settings(1), digits, 101, 2)
    assert "memory is available; use --workers 100 or fewer" in str(info.value)


def test_memory_is_checked_only_beyond_one_worker_per_core(digits, available):
    available(0)
    check_workload(settings(32), digits, 2, 2)
    with pytest.raises(UserError, match="memory"):
        check_workload(settings(32), digits, 3, 2)


def test_the_model_and_its_batch_raise_the_estimate_and_are_left_as_they_were(digits,
                                                                            available):
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.BatchNorm1d(256), nn.ReLU(),
                          nn.Dropout(0.5), nn.Linear(256, 10)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    small = preflight._activation_bytes(model, digits, 8)
    large = preflight._activation_bytes(model, digits, 256)
    assert 0 < small < large
    # Training-mode forward passes ran, yet nothing the run starts from changed.
    assert not model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)

    available(100 * WORKER_FLOOR_BYTES)
    check_workload(settings(8), digits, 100, 2)
    with pytest.raises(UserError) as info:
        check_workload(settings(8), digits, 100, 2, model=model)
    most = int(re.search(r"memory is available; use --workers (\d+) or fewer$",
                         str(info.value)).group(1))
    assert most < 100
    check_workload(settings(8), digits, most, 2, model=model)


def test_under_torchrun_only_the_ranks_of_this_node_share_its_cores_and_memory(digits,
                                                                              available):
    # 4 nodes of 2 ranks each: 8 workers split the data, 2 share this node's 2 cores.
    available(3 * WORKER_FLOOR_BYTES)
    assert check_workload(settings(1), digits, 8, 2, local_workers=2) == []
    with pytest.raises(UserError, match="8 workers need about"):
        check_workload(settings(1), digits, 8, 2)            # all 8 on one machine
    available(2**40)
    [warning] = check_workload(settings(1), digits, 40, 2, local_workers=5)
    assert warning.startswith("5 workers on 2 usable cores")


def test_ranks_taking_turns_hold_an_interpreter_and_a_batch_once_per_process(digits,
                                                                            available):
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    available(10 * WORKER_FLOOR_BYTES)
    with pytest.raises(UserError, match="100 workers need about"):
        check_workload(settings(8), digits, 100, 2, model=model)   # a process each
    check_workload(settings(8), digits, 100, 2, model=model, processes=2)


def test_ranks_that_share_their_parameters_are_counted_with_their_own_copies_only(digits,
                                                                                 available):
    # ddp's sharded step keeps parameters and optimizer state once, in shared memory: each
    # rank holds only its gradients, a quarter of what a private replica with Adam holds.
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4096), nn.Linear(4096, 10))
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    activations = preflight.ACTIVATION_FACTOR * preflight._activation_bytes(model, digits, 8)
    per_process = WORKER_FLOOR_BYTES + activations
    available(50 * (per_process + 2 * params))
    with pytest.raises(UserError, match="50 workers need about"):
        check_workload(settings(8), digits, 50, 2, model=model)
    check_workload(settings(8), digits, 50, 2, model=model, parameter_copies=1)


def test_the_sharded_ddp_step_and_hogwild_say_how_many_copies_a_rank_holds(digits):
    from mptrain.comm.kind import CommKind
    from mptrain.config import TrainConfig
    from mptrain.launch.plan import RunPlan
    from mptrain.strategies.ddp import DDPStrategy
    from mptrain.strategies.hogwild import HogwildStrategy

    mlp = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Linear(32, 10))
    plan = RunPlan(4, 1, "fork", "", CommKind.SHM, cores=2)

    def copies(strategy, **settings):
        config = TrainConfig.from_settings({"strategy": strategy, "workers": 4, **settings})
        cls = {"ddp": DDPStrategy, "hogwild": HogwildStrategy}[strategy]
        return cls(config).needs(mlp, digits, plan).private_parameter_copies

    assert copies("ddp") == 1
    assert copies("hogwild", optimizer="adam") == 3
    assert copies("hogwild", optimizer="adam", share_optimizer_state=True) == 1
    assert copies("hogwild", optimizer="sgd", momentum=0.0) == 1


def test_workers_taking_batches_from_a_queue_need_a_batch_each_not_a_shard(digits):
    samples = len(digits.train)
    batch = -(-samples // 4) + 1      # 4 batches, though a shard of a quarter is smaller
    assert check_workload(settings(batch), digits, 4, 4, queued_batches=True) == []
    with pytest.raises(UserError) as info:
        check_workload(settings(batch), digits, 5, 5, queued_batches=True)
    message = str(info.value)
    largest = (samples - 1) // 4
    assert message == (f"5 workers share the epoch's 4 batch(es) of {batch}: 1 would have "
                       f"nothing to train; use --workers 4 or fewer, or --batch-size "
                       f"{largest} or less")
    assert -(-samples // largest) >= 5 > -(-samples // (largest + 1))


@pytest.mark.timeout(60)
def test_hogwild_runs_where_each_worker_gets_a_batch_but_no_full_shard():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(10, 3), torch.randint(0, 2, (10,)))
    result = mptrain.fit(nn.Linear(3, 2), data, data, strategy="hogwild", workers=2,
                         epochs=1, batch_size=6, quiet=True)   # batches of 6 and 4
    assert result.summary["train_samples"] == 10


@pytest.mark.parametrize("strategy, words", [
    ("hogwild", "use workers 1 or fewer, or batch_size 63 or less"),
    ("sync", "use workers 1 or fewer, or batch_size 32 or less"),
])
def test_fit_is_told_its_keywords_not_the_flags(strategy, words):
    # fit() was told '--workers 1 or fewer, or --batch-size 63 or less'.
    inputs = torch.randn(64, 4)
    data = TensorDataset(inputs, (inputs[:, 0] > 0).long())
    with pytest.raises(UserError) as info:
        mptrain.fit(nn.Linear(4, 2), data, strategy=strategy, workers=2, batch_size=64,
                    epochs=1, quiet=True)
    assert words in str(info.value) and "--" not in str(info.value)


@pytest.mark.parametrize("strategy, workers, cores, requested, threads", [
    ("single", 1, 2, None, 2),      # mptrain's own budget never oversubscribes
    ("single", 1, 2, 64, 2),        # 64 threads on 2 cores: 62 samples/s instead of ~1,300
    ("hogwild", 2, 2, 2, 1),        # two processes of 2 threads on 2 cores
    ("hogwild", 2, 8, 2, 2),
    ("sync", 8, 4, 2, 2),           # ranks taking turns in 2 processes of 2 threads
    ("sync", 1, 2, 1, 1),
])
def test_more_threads_than_cores_are_capped_at_the_cores(strategy, workers, cores, requested,
                                                         threads):
    # `--threads-per-worker 64` on 2 cores ran with 64 threads and a warning (issue 57).
    from mptrain.config import TrainConfig
    from mptrain.launch import plan as plan_module
    from mptrain.strategies import make_strategy

    config = TrainConfig(strategy=strategy, workers=workers, threads_per_worker=requested)
    from mptrain.api import bundle_from_datasets

    data = bundle_from_datasets(
        TensorDataset(torch.randn(64, 4), torch.arange(64) % 2), None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_module, "usable_cores", lambda: cores)
        plan = plan_module.plan_workers(config, make_strategy(config), nn.Linear(4, 2), data) \
            if workers > 1 else plan_module.plan_in_process(config)
    assert plan.threads == threads


@pytest.mark.parametrize("requested, granted, processes, cores, said", [
    (None, 2, 1, 2, False), (1, 1, 2, 2, False), (2, 2, 1, 2, False), (64, 2, 1, 2, True),
    (2, 1, 2, 2, True),
])
def test_a_capped_thread_count_is_said_in_one_line(requested, granted, processes, cores, said):
    from mptrain.launch.preflight import thread_warnings

    lines = thread_warnings(requested, granted, processes, cores)
    assert bool(lines) == said
    if said:
        assert lines == [f"--threads-per-worker {requested} capped at {granted}: "
                         f"{processes} process{'es' if processes > 1 else ''} on {cores} "
                         "usable cores, and more threads than cores time-share them, "
                         "slowing every step"]


def test_the_bench_caps_its_threads_at_the_cores_and_says_so(monkeypatch, capsys):
    from mptrain.cli import bench
    from mptrain.launch import tuning

    monkeypatch.setattr(tuning, "usable_cores", lambda: 2)
    assert bench._threads_up_to_the_cores(64) == 2
    assert bench._threads_up_to_the_cores(2) == 2 and bench._threads_up_to_the_cores(None) is None
    assert capsys.readouterr().err == ("mptrain bench: --threads-per-worker 64 capped at 2, "
                                       "the usable cores: more threads than cores time-share "
                                       "them, slowing every step\n")


@pytest.mark.parametrize("where", ["inputs", "targets"])
def test_nan_or_infinite_user_data_is_named_in_a_warning(where, capsys):
    # Missing values as NaN: the run "diverged" at its first step and advised a lower lr,
    # which cannot help. A warning, not a refusal: fedavg drops a client whose update is
    # non-finite, and a client with corrupt data is a case to simulate.
    inputs, targets = torch.randn(24, 4), torch.randn(24)
    (inputs if where == "inputs" else targets)[3] = float("nan")
    with pytest.raises(mptrain.errors.TrainingDiverged) as stop:
        mptrain.fit(nn.Linear(4, 1), TensorDataset(inputs, targets), epochs=1, batch_size=4,
                    quiet=False)
    # The stop names the data too, not only "try a lower lr", which cannot help (issue 57).
    assert str(stop.value).endswith(f"the training data's {where} hold NaN or infinite values "
                                    "(first in sample 3): drop or fill those samples")
    assert "lower" not in str(stop.value)
    shown = capsys.readouterr()
    assert (f"the training data's {where} hold NaN or infinite values (first in sample 3): "
            "a step on them has a non-finite loss; drop or fill those samples") \
        in " ".join((shown.out + shown.err).split())   # as the console wrapped it


class Augmenting(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, index):
        return torch.randn(4), index % 2


def test_a_getitem_that_augments_at_random_is_named_in_one_warning_line(capsys):
    # Its noise was drawn once, at stacking, and every epoch trained on the same draws,
    # without a word.
    mptrain.fit(nn.Linear(4, 2), Augmenting(), epochs=1, batch_size=4)
    err = capsys.readouterr().err
    line = " ".join(err.split())   # as the console wrapped it
    assert ("mptrain: the training data's __getitem__ gave sample 0 other values when read "
            "again: its randomness (augmentation) is drawn once, when mptrain stacks the data "
            "before training, and every epoch sees the same draws; for fresh draws each "
            "batch, move the augmentation into transform (a function (inputs, targets, "
            "generator) -> (inputs, targets) run on each training batch in the workers) or "
            "use augment crop:PAD,hflip,shift:PX") in line
    assert err.count("mptrain:") == 1


def test_the_built_in_data_sets_are_not_scanned(digits):
    assert preflight.data_warnings(digits) == []
