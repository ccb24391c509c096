"""Real fedavg runs of the workbench's algorithms on tiny data: the same model whatever the
number of workers, what each round reports, refusals, and bitwise resume with every new
piece of state (server moments, control variates, clip, accountant)."""

import copy
import json
import math

import pytest
import torch

import mptrain
from mptrain.config import TrainConfig
from mptrain.data.partitions import partition_clients
from mptrain.errors import UserError
from mptrain.strategies import fedavg as fedavg_module
from mptrain.strategies.fedavg import shared as fedavg_shared

from fedavg_workload import RUN, make_data, make_model, make_test_data

DP = dict(sampling="poisson", dp_clip=0.5, dp_noise=0.8, clients_per_round=6)


def fit(model, workers=2, data=None, **options):
    return mptrain.fit(model, data or make_data(), make_test_data(),
                       **{**RUN, "workers": workers, **options})


def state_of(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same(a, b):
    for name, tensor in state_of(a).items():
        assert torch.equal(tensor, state_of(b)[name]), name


def assert_differs(a, b):
    assert any(not torch.equal(t, state_of(b)[k]) for k, t in state_of(a).items())


OPTIONS = {
    "fedadam": dict(server_optimizer="adam", server_lr=0.05),
    "fedyogi": dict(server_optimizer="yogi", server_lr=0.05, server_betas="0.8,0.95",
                    server_tau=0.01),
    "fedadagrad": dict(server_optimizer="adagrad"),
    "scaffold": dict(scaffold=True),
    "unreliable": dict(dropout_rate=0.3, straggler_rate=0.5),
    "dp": dict(DP),
    "dp-adaptive": dict(DP, dp_clip_quantile=0.5, dp_count_noise=1.0,
                        server_optimizer="yogi"),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_each_algorithm_gives_the_bitwise_same_model_on_one_and_two_workers(name):
    initial = make_model()
    one = fit(copy.deepcopy(initial), workers=1, **OPTIONS[name])
    two = fit(copy.deepcopy(initial), workers=2, **OPTIONS[name])
    assert_same(one.model, two.model)
    assert_differs(two.model, fit(copy.deepcopy(initial)).model)   # not plain FedAvg
    assert all(torch.isfinite(t).all() for t in state_of(two.model).values())


@pytest.mark.timeout(120)
def test_unreliable_clients_are_counted_per_round():
    result = fit(make_model(), rounds=6, dropout_rate=0.3, straggler_rate=0.5)
    rows = [m.as_dict() for m in result.rounds]
    assert all(r["reported"] + r["dropped"] == r["clients"] == 4 for r in rows)
    assert sum(r["dropped"] for r in rows) > 0 and sum(r["partial"] for r in rows) > 0
    assert all(r["partial"] <= r["clients"] for r in rows)


@pytest.mark.timeout(120)
def test_a_round_where_every_client_drops_changes_nothing_and_is_reported(capsys):
    # Round 2 of seed 0 at rate 0.9: found by the seeded draws themselves.
    from mptrain.federated.availability import drops_out
    from mptrain.federated.sampling import sample_clients
    silent = [r for r in range(6) if all(drops_out(0, r, c, 0.9)
                                         for c in sample_clients(12, 4, 0, r))]
    assert silent, "the seed gives no all-dropped round; pick another rate"
    rounds = silent[0] + 1
    before = fit(make_model(), rounds=rounds - 1, dropout_rate=0.9) if rounds > 1 else None
    result = fit(make_model(), rounds=rounds, dropout_rate=0.9, quiet=False)
    row = result.rounds[-1].as_dict()
    assert row["reported"] == 0 and row["dropped"] == 4
    assert f"round {rounds}: no sampled client reported" in capsys.readouterr().err
    if before is not None:
        assert_same(before.model, result.model)


@pytest.mark.timeout(120)
def test_a_client_with_a_non_finite_update_is_dropped_and_counted():
    parts = partition_clients("iid", make_data().tensors[1], RUN["clients"], RUN["seed"])
    poisoned = int(parts[5][0])
    result = fit(make_model(), data=make_data(poisoned, poison=math.inf),
                 clients_per_round=12)
    rows = [m.as_dict() for m in result.rounds]
    assert all(r["nonfinite_clients"] == [5] and r["failed_clients"] == [5] for r in rows)
    assert all(r["reported"] == 11 for r in rows)
    assert all(torch.isfinite(t).all() for t in state_of(result.model).values())


@pytest.mark.timeout(120)
def test_dp_reports_the_accountants_epsilon_every_round(tmp_path, capsys):
    dp_accounting = pytest.importorskip("dp_accounting")
    result = fit(make_model(), rounds=4, out=tmp_path, quiet=False, **DP)
    shown = capsys.readouterr().out
    assert "ε " in shown and "privacy spent: epsilon" in shown and "at delta 1e-05" in shown
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    q = DP["clients_per_round"] / RUN["clients"]
    for row in rows:
        accountant = dp_accounting.rdp.RdpAccountant()
        accountant.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(0.8)),
            row["round"]))
        assert row["epsilon"] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epsilon"] == rows[-1]["epsilon"] and summary["dp_delta"] == 1e-5
    assert len({row["clients"] for row in rows}) > 1 or rows[0]["clients"] != 6  # Poisson
    assert result.summary["accountant"] == "rdp"


@pytest.mark.timeout(120)
def test_target_epsilon_stops_before_the_budget_is_exceeded():
    full = fit(make_model(), rounds=8, **DP)
    epsilons = [m.as_dict()["epsilon"] for m in full.rounds]
    target = (epsilons[2] + epsilons[3]) / 2     # round 4 would pass it
    stopped = fit(make_model(), rounds=8, target_epsilon=target, **DP)
    assert len(stopped.rounds) == 3
    assert stopped.rounds[-1].as_dict()["epsilon"] <= target
    assert stopped.summary["stopped_for_privacy_at_round"] == 3
    assert stopped.rounds[-1].test_accuracy is not None   # the last round is evaluated
    with pytest.raises(UserError, match="spent by the first round"):
        fit(make_model(), rounds=8, target_epsilon=epsilons[0] / 2, **DP)


@pytest.mark.timeout(120)
def test_per_client_evaluation_every_n_rounds():
    result = fit(make_model(), rounds=4, client_eval_every=2)
    rows = [m.as_dict() for m in result.rounds]
    assert ["client_acc_mean" in r for r in rows] == [False, True, False, True]
    last = rows[-1]
    assert last["clients_evaluated"] == 12
    assert 0 <= last["client_acc_worst"] <= last["client_acc_p10"] <= last["client_acc_mean"] <= 1
    assert last["client_acc_std"] >= 0


RESUMED = {
    "scaffold-fedadam-unreliable": dict(scaffold=True, server_optimizer="adam",
                                        server_lr=0.05, dropout_rate=0.2, straggler_rate=0.3),
    "dp-adaptive-fedyogi": dict(DP, dp_clip_quantile=0.5, dp_count_noise=1.0,
                                server_optimizer="yogi", server_lr=0.05),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", sorted(RESUMED))
def test_resume_is_bitwise_with_every_new_state(tmp_path, name):
    options = RESUMED[name]
    initial = make_model()
    whole = fit(copy.deepcopy(initial), rounds=4, **options)
    fit(copy.deepcopy(initial), rounds=2, out=tmp_path, checkpoint_every=1, **options)
    # The helper passes RUN's settings again, so the run's own are given again too.
    resumed = fit(copy.deepcopy(initial), rounds=4, resume=tmp_path, out=tmp_path, **options)
    assert len(resumed.rounds) == 4
    assert_same(whole.model, resumed.model)
    for key in ("epsilon", "dp_clip", "reported"):
        assert [m.as_dict().get(key) for m in resumed.rounds] == \
            [m.as_dict().get(key) for m in whole.rounds], key
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert "server" in checkpoint["ranks"][0]


#: A checkpoint's config as mptrain wrote it before fedavg's settings had a section of their
#: own (b8e2fa0): one flat dict, the flags' names, in this order.
FLAT_CONFIG_KEYS = [
    "strategy", "workers", "epochs", "batch_size", "lr", "momentum", "optimizer", "lr_decay",
    "lr_schedule", "weight_decay", "seed", "threads_per_worker", "sync_every",
    "share_optimizer_state", "ddp_backend", "device", "precision", "start_method",
    "worker_timeout", "sharing_strategy", "checkpoint_every", "steps_per_epoch",
    "max_restarts", "eval_every", "target_accuracy", "eval_batch_size", "quiet", "rounds",
    "clients", "clients_per_round", "client_fraction", "local_epochs", "partition", "prox_mu",
    "server_optimizer", "server_lr", "server_momentum", "server_betas", "server_tau",
    "accept_failures", "scaffold", "sampling", "dropout_rate", "straggler_rate", "dp_clip",
    "dp_noise", "dp_delta", "target_epsilon", "accountant", "dp_clip_quantile", "dp_clip_lr",
    "dp_count_noise", "client_eval_every"]
#: Settings added since (issue 39's two, issue 41's three, issue 50's three, issue 51's clock
#: four, issue 54's three and fedbuff's four), after the others; issue 40's --compile sits
#: after --precision.
ADDED_KEYS = ["vectorize_clients", "vectorize_chunk", "aggregator", "malicious_fraction",
              "attack", "drop_stragglers", "eval_train", "client_speeds", "availability_trace",
              "round_deadline", "over_select", "straggler_mode", "personalize", "personal_memory",
              "personal_head_epochs", "concurrency", "buffer_size", "staleness_weight",
              "max_staleness"]
COMPILE_AFTER = "precision"
#: Issue 56's data-pipeline settings, after --overwrite.
PIPELINE_KEYS = ["augment", "transform", "data_dtype", "collate", "loader", "loader_workers",
                 "drop_last"]


@pytest.mark.timeout(120)
def test_a_flat_checkpoint_config_resumes_with_its_own_fedavg_settings(tmp_path):
    options = dict(server_optimizer="adam", server_lr=0.05, server_betas="0.8,0.9")
    initial = make_model()
    whole = fit(copy.deepcopy(initial), rounds=4, **options)
    fit(copy.deepcopy(initial), rounds=2, out=tmp_path, checkpoint_every=1, **options)
    path = tmp_path / "checkpoint.pt"
    saved = torch.load(path, weights_only=True)
    # Settings added since then come after (--compile beside --precision).
    expected = FLAT_CONFIG_KEYS + ADDED_KEYS
    expected.insert(expected.index(COMPILE_AFTER) + 1, "compile")
    expected.insert(expected.index("quiet") + 1, "overwrite")   # --overwrite beside --quiet
    at = expected.index("overwrite") + 1
    expected[at:at] = PIPELINE_KEYS
    assert list(saved["config"]) == expected
    for added in ADDED_KEYS + PIPELINE_KEYS + ["compile", "overwrite"]:
        del saved["config"][added]
    # As a config file or an older mptrain may have left it: betas as a list.
    saved["config"]["server_betas"] = [0.8, 0.9]
    torch.save(saved, path)
    # Nothing but the rounds given again: the server's settings come from the checkpoint.
    resumed = fit(copy.deepcopy(initial), rounds=4, resume=tmp_path, out=tmp_path)
    assert_same(whole.model, resumed.model)


@pytest.mark.timeout(120)
def test_client_variates_in_a_mapped_file_give_the_same_model(tmp_path, monkeypatch, capsys):
    initial = make_model()
    in_shm = fit(copy.deepcopy(initial), scaffold=True)
    monkeypatch.setattr(fedavg_shared, "SHM_SHARE", 0.0)   # /dev/shm "too small"
    in_file = fit(copy.deepcopy(initial), scaffold=True, out=tmp_path / "run", quiet=False)
    assert_same(in_shm.model, in_file.model)
    assert not (tmp_path / "run" / fedavg_shared.CONTROLS_FILE).exists()   # scratch, gone
    shown = capsys.readouterr()
    assert "in a memory-mapped file" in shown.out + shown.err   # the banner says where
    with pytest.raises(UserError, match="SCAFFOLD's client variates need .* no out folder"):
        fit(copy.deepcopy(initial), scaffold=True)


@pytest.mark.parametrize("options, needle", [
    (dict(dp_noise=1.0, dp_clip=1.0), "dp_noise needs sampling poisson"),
    (dict(dp_noise=1.0, sampling="poisson"), "dp_noise needs dp_clip"),
    (dict(DP, scaffold=True), "scaffold with dp_noise is refused"),
    (dict(scaffold=True, momentum=0.9),
     "scaffold needs plain client SGD (optimizer sgd momentum 0)"),
    (dict(scaffold=True, optimizer="adam"), "scaffold needs plain client SGD"),
    (dict(scaffold=True, prox_mu=0.1), "choose one"),
    (dict(server_optimizer="adam", server_momentum=0.9), "server_momentum is sgd's"),
    (dict(server_betas="0.9,0.99"), "server_betas does nothing with server_optimizer sgd"),
    (dict(server_tau=0.01), "server_tau does nothing"),
    # each value on its own, and each combination, is named as fit() was called (issue 43)
    (dict(server_optimizer="adam", server_betas="0.9"), "server_betas must be two numbers"),
    (dict(target_epsilon=3.0), "target_epsilon is about differential privacy"),
    (dict(dropout_rate=1.0), "dropout_rate must be in [0, 1)"),
    (dict(straggler_rate=-0.1), "straggler_rate must be in [0, 1]"),
    (dict(dp_clip=0.0), "dp_clip must be > 0"),
    (dict(server_optimizer="lamb"), "unknown server_optimizer"),
    (dict(accountant="moments", **DP), "unknown accountant"),
    (dict(dp_clip_quantile=0.5), "give the starting dp_clip"),
    (dict(DP, dp_clip_quantile=0.5), "give dp_count_noise above"),
])
def test_combinations_that_make_no_sense_are_one_line_refusals(options, needle):
    with pytest.raises(UserError) as caught:
        fit(make_model(), **options)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_other_strategies_refuse_the_federated_settings():
    with pytest.raises(UserError, match="--scaffold does nothing with --strategy sync"):
        TrainConfig.from_settings({"strategy": "sync", "scaffold": True})
    with pytest.raises(UserError, match="--dp-noise does nothing with --strategy ddp"):
        TrainConfig.from_settings({"strategy": "ddp", "dp_noise": 1.0})


def test_config_file_takes_betas_as_a_list_or_a_string(tmp_path):
    from mptrain.config import load_config_file
    path = tmp_path / "run.toml"
    path.write_text('strategy = "fedavg"\nserver-optimizer = "yogi"\n'
                    'server-betas = [0.8, 0.95]\nserver-tau = 0.01\n')
    config = TrainConfig.from_settings(load_config_file(path))
    assert config.fedavg.server_betas == (0.8, 0.95) and config.fedavg.server_tau == 0.01
    assert TrainConfig.from_settings({"strategy": "fedavg", "server_optimizer": "adam",
                                      "server_betas": "0.5,0.6"}).fedavg.server_betas == (0.5, 0.6)


@pytest.mark.timeout(120)
def test_a_round_where_every_client_sends_a_non_finite_update_stops_the_run():
    # Finite but huge weights: every client's first step overflows. Dropping them all and
    # going on would change nothing in any later round; the run stops as diverged instead.
    from mptrain.errors import TrainingDiverged

    model = make_model()
    with torch.no_grad():
        model[2].weight.fill_(1e38)
    with pytest.raises(TrainingDiverged, match=r"every client's update was non-finite in "
                                               r"round 1 \(4 clients\); stopped"):
        fit(model, rounds=3)


@pytest.mark.parametrize("rounds, expected", [
    # (clients, failed_clients incl. non-finite, nonfinite_clients) per round
    ([(4, [1, 2, 3, 4], [1, 2, 3, 4])], "non-finite in round 1 (4 clients)"),
    ([(4, [1, 2, 3], [1, 2, 3])], None),                  # one client's update was finite
    ([(4, [1, 2, 3, 4], [1, 2])], "round 1 (2 clients)"),  # 2 raised, both that trained bad
    ([(4, [1, 2, 3], [1, 2])], None),                    # 1 raised, 1 of 3 trained finite
    ([(0, [], [])], None),                               # Poisson drew nobody
    ([(1, [7], [7])] * 2, None),                         # a lone client: its data, maybe
    ([(1, [7], [7]), (1, [3], [3]), (1, [5], [5])], "non-finite in rounds 1-3"),
    ([(1, [7], [7]), (1, [], []), (1, [5], [5])], None),  # not in a row
])
def test_a_round_has_diverged_only_when_the_global_model_is_what_broke(rounds, expected):
    from types import SimpleNamespace

    strategy = fedavg_module.FedAvgStrategy(TrainConfig(strategy="fedavg", clients=12))
    rows = []
    for index, (clients, failed, nonfinite) in enumerate(rounds):
        extras = {"clients": clients, "failed_clients": failed,
                  "nonfinite_clients": nonfinite}
        rows.append(strategy.round_extras([SimpleNamespace(
            index=index, extras=extras, evaluated_at=1.0, train_started=0.0)]))
    found = rows[-1].get("diverged")
    if expected is None:
        assert found is None
    else:
        assert expected in found
