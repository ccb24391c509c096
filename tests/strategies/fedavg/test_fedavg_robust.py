"""Real fedavg runs with robust rules and attacking clients on tiny data: the mean collapses
where the robust rules hold, the same model whatever the number of workers, bitwise resume,
what each round reports, skipped rounds, and the refusals."""

import copy
import json

import pytest
import torch
from torch.utils.data import TensorDataset

import mptrain
from mptrain.errors import UserError
from mptrain.federated.robust.attacks import malicious_clients
from mptrain.federated.sampling import sample_clients
from mptrain.strategies.fedavg import refusals

from fedavg_workload import RUN, make_data, make_model, make_test_data
from user_errors import fail

pytestmark = pytest.mark.timeout(180)
#: 10 of 12 clients a round: Krum tolerates F <= 3, Bulyan F <= 1.
WIDE = dict(clients=12, clients_per_round=10, rounds=4)
ATTACKED = dict(WIDE, malicious_fraction=0.25)


def fit(model=None, workers=2, **options):
    return mptrain.fit(model or make_model(), make_data(), make_test_data(),
                       **{**RUN, "workers": workers, **options})


def state_of(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same(a, b):
    for name, tensor in state_of(a).items():
        assert torch.equal(tensor, state_of(b)[name]), name


def accuracy(result):
    return result.rounds[-1].as_dict()["test_accuracy"]


def test_mean_collapses_under_a_large_gaussian_attack_while_the_robust_rules_hold():
    clean = accuracy(fit(**{**WIDE, "rounds": 5}))
    attack = dict(ATTACKED, rounds=5, attack="gaussian:100")
    assert accuracy(fit(**attack)) < clean - 0.25          # ~chance on 3 classes
    for rule in ("median", "krum:2", "geometric-median"):
        assert accuracy(fit(aggregator=rule, **attack)) >= clean - 0.05, rule


CASES = {
    "krum-alie": dict(ATTACKED, aggregator="krum:2", attack="alie"),
    "median-sign-flip": dict(ATTACKED, aggregator="median", attack="sign-flip:2"),
    "trimmed-label-flip": dict(ATTACKED, aggregator="trimmed-mean:0.3", attack="label-flip"),
    "bulyan-gaussian": dict(ATTACKED, aggregator="bulyan:1", attack="gaussian:5"),
    "norm-bound-scaling": dict(ATTACKED, aggregator="norm-bound:0.5", attack="scaling:10"),
    "geomed-prox-momentum-dropouts": dict(ATTACKED, aggregator="geometric-median",
                                          attack="alie:1", prox_mu=0.1, server_momentum=0.9,
                                          dropout_rate=0.2, straggler_rate=0.3),
    "multi-krum-adam": dict(WIDE, aggregator="multi-krum:2,5", server_optimizer="adam",
                            server_lr=0.05),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_and_attack_gives_the_bitwise_same_model_on_one_and_two_workers(name):
    # One client at a time: auto's rule stacks the 10 clients of one worker but not the 5
    # of each of two, and the two paths agree to float tolerance, not bitwise.
    initial = make_model()
    one = fit(copy.deepcopy(initial), workers=1, vectorize_clients="off", **CASES[name])
    two = fit(copy.deepcopy(initial), workers=2, vectorize_clients="off", **CASES[name])
    assert_same(one.model, two.model)
    assert all(torch.isfinite(t).all() for t in state_of(two.model).values())
    plain = fit(copy.deepcopy(initial), vectorize_clients="off",
                **{k: v for k, v in CASES[name].items()
                                           if k not in ("aggregator", "attack",
                                                        "malicious_fraction")})
    assert any(not torch.equal(t, state_of(plain.model)[k])
               for k, t in state_of(two.model).items())   # the rule did something


@pytest.mark.parametrize("name", ["trimmed-label-flip", "krum-alie"])
def test_with_stacked_clients_attackers_still_attack_on_any_worker_count(name):
    """Attackers train on the one-client path (it has the attack's hooks), honest clients
    stacked: the same bits on one and two workers, and not the unattacked model."""
    initial = make_model()
    one = fit(copy.deepcopy(initial), workers=1, vectorize_clients="on", **CASES[name])
    two = fit(copy.deepcopy(initial), workers=2, vectorize_clients="on", **CASES[name])
    assert_same(one.model, two.model)
    honest = fit(copy.deepcopy(initial), workers=2, vectorize_clients="on",
                 **{**CASES[name], "attack": None, "malicious_fraction": 0.0})
    assert any(not torch.equal(t, state_of(honest.model)[k])
               for k, t in state_of(two.model).items())


def test_mean_with_no_attack_is_plain_fedavg_bit_for_bit():
    initial = make_model()
    assert_same(fit(copy.deepcopy(initial), **WIDE).model,
                fit(copy.deepcopy(initial), aggregator="mean", **WIDE).model)


@pytest.mark.parametrize("name", ["krum-alie", "geomed-prox-momentum-dropouts"])
def test_resume_is_bitwise(tmp_path, name):
    options = {**CASES[name], "rounds": 4}
    initial = make_model()
    whole = fit(copy.deepcopy(initial), **options)
    fit(copy.deepcopy(initial), **{**options, "rounds": 2}, out=tmp_path, checkpoint_every=1)
    resumed = fit(copy.deepcopy(initial), **options, resume=tmp_path, out=tmp_path)
    assert_same(whole.model, resumed.model)
    for key in ("malicious", "malicious_selected", "update_norm_median"):
        assert [m.as_dict().get(key) for m in resumed.rounds] == \
            [m.as_dict().get(key) for m in whole.rounds], key


def test_each_round_counts_the_attackers_sampled_and_selected(tmp_path):
    result = fit(aggregator="krum:2", attack="gaussian:50", out=tmp_path, **ATTACKED)
    bad = set(malicious_clients(12, 0.25, seed=0))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    for index, row in enumerate(rows):
        sampled = sample_clients(12, 10, 0, index)
        assert row["malicious"] == row["malicious_reported"] == len(bad & set(sampled))
        assert row["selected"] == 1 and row["malicious_selected"] == 0   # noise never wins
        assert row["update_norm_median"] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["aggregator"], summary["attack"], summary["malicious_clients"],
            summary["rounds_skipped"]) == ("krum:2", "gaussian:50", 3, 0)
    assert len(result.rounds) == 4


def test_rounds_with_too_few_reports_for_the_rule_are_skipped_and_counted(tmp_path, capsys):
    result = fit(aggregator="krum:3", dropout_rate=0.3, out=tmp_path, quiet=False, **WIDE)
    rows = [m.as_dict() for m in result.rounds]
    skipped = [r for r in rows if r.get("skipped")]
    assert skipped and all(r["reported"] <= 8 for r in skipped)
    assert all(r["reported"] > 8 for r in rows if not r.get("skipped"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds_skipped"] == len(skipped)
    shown = capsys.readouterr()
    assert "skipped (" in shown.out + shown.err and "needs more than 2F+2 = 8" in \
        shown.out + shown.err


def test_the_banner_says_what_the_table_takes(capsys):
    fit(aggregator="median", attack="sign-flip", quiet=False, **ATTACKED)
    shown = capsys.readouterr()
    banner = shown.out + shown.err
    assert "aggregator median: every update in a shared table, 10 clients x 163 " \
           "parameters x 4 bytes = 6.4 KiB" in banner
    assert "attack sign-flip by 3 of 12 clients" in banner


DP = dict(sampling="poisson", dp_clip=0.5, dp_noise=0.8)


@pytest.mark.parametrize("options, needle", [
    (dict(WIDE, aggregator="median", **DP), "aggregator median with dp_clip/dp_noise"),
    (dict(WIDE, aggregator="mean", attack="gaussian", malicious_fraction=0.2, dp_clip=1.0),
     "attack gaussian with dp_clip"),
    (dict(WIDE, aggregator="krum:1", scaffold=True), "with scaffold is refused"),
    (dict(WIDE, attack="sign-flip"), "add malicious_fraction P"),
    (dict(WIDE, malicious_fraction=0.2), "malicious_fraction needs attack"),
    (dict(WIDE, aggregator="krun"), "did you mean 'krum'"),
    (dict(WIDE, aggregator="krum:4"), "give F <= 3"),
    (dict(WIDE, aggregator="bulyan:2"), "more than 4F+3 = 11 clients per round, got 10"),
    (dict(WIDE, aggregator="trimmed-mean:0.6"), "0 <= BETA < 0.5"),
    (dict(WIDE, attack="scaling", malicious_fraction=0.2), "needs its factor"),
    (dict(WIDE, malicious_fraction=1.5, attack="alie"), "malicious_fraction must be in"),
    (dict(WIDE, aggregator=3), "fit(): aggregator must be a string"),
])
def test_refusals_are_one_line(options, needle):
    with pytest.raises(UserError) as caught:
        fit(**options)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_table_that_does_not_fit_is_refused_with_the_figures(monkeypatch):
    monkeypatch.setattr(refusals, "TABLE_LIMIT_BYTES", 1000)
    with pytest.raises(UserError, match=r"10 clients x 163 parameters x 4 bytes = 6.4 KiB, "
                                        r"over the 1000 B limit"):
        fit(aggregator="median", **WIDE)
    fit(**WIDE)   # the mean needs no table of its own


def test_under_torchrun_rank_zeros_machine_must_hold_the_gathered_table(monkeypatch):
    from types import SimpleNamespace

    from mptrain.comm.kind import CommKind
    from mptrain.config import TrainConfig
    from mptrain.launch.plan import RunPlan

    config = TrainConfig(strategy="fedavg", workers=4, aggregator="median", **WIDE)
    data, model = make_data(), make_model()
    monkeypatch.setattr(refusals.psutil, "virtual_memory",
                        lambda: SimpleNamespace(available=1000))

    def plan(rank_zero_here, comm=CommKind.GLOO):
        return RunPlan(4, 1, None, "started by torchrun", comm, local_workers=2,
                       rank_zero_here=rank_zero_here)

    with pytest.raises(UserError, match=r"gathers every client's update to rank 0: 10 "
                                        r"clients x 163 parameters x 4 bytes = 6.4 KiB"):
        refusals.check_robust(config, data, model, plan(True))
    refusals.check_robust(config, data, model, plan(False))   # not rank 0's machine
    # mptrain's own workers share the table in /dev/shm: counted there, not here.
    refusals.check_robust(config, data, model, plan(True, CommKind.SHM))


def test_label_flip_needs_class_labels():
    regression = TensorDataset(torch.randn(96, 6), torch.randn(96, 1))
    with pytest.raises(UserError, match="label-flip flips class labels"):
        mptrain.fit(torch.nn.Linear(6, 1), regression,
                    **{**RUN, **WIDE, "workers": 1, "attack": "label-flip",
                       "malicious_fraction": 0.25})


def test_the_command_line_takes_the_flags_and_refuses_in_one_line(tmp_path, capsys):
    from mptrain.cli import main

    fast = ["run", "--strategy", "fedavg", "--workers", "2", "--threads-per-worker", "1",
            "--rounds", "2", "--clients", "10", "--clients-per-round", "8", "--quiet"]
    config = tmp_path / "run.toml"
    config.write_text('aggregator = "multi-krum:1,4"\nmalicious-fraction = 0.2\n')
    assert main([*fast, "--config", str(config), "--attack", "alie:0.5", "--out",
                 str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["aggregator"], summary["attack"], summary["malicious_fraction"]) == \
        ("multi-krum:1,4", "alie:0.5", 0.2)
    capsys.readouterr()
    assert "did you mean 'median'" in fail([*fast, "--aggregator", "medain"], capsys)
    assert main(["run", "--help"]) == 0
    federated = capsys.readouterr().out.split(
        "Federated options (--strategy fedavg, fedbuff):")[1]
    for flag in ("--aggregator", "--malicious-fraction", "--attack"):
        assert flag in federated, flag
    assert "Weighted by client data: mean, multi-krum" in " ".join(federated.split())
