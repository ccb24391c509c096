"""--client-eval-every and --personalize in fedbuff runs (issue 54): each client scored on
its own test split every N server steps, as fedavg's rounds say it (figures, rows, console,
banner); fine-tuning leaves the global model bit for bit as plain fedbuff's; FedPer's and
FedRep's layers are never averaged; the clock charges the epochs FedRep's head and Ditto's
model train; a client that trains twice from one version starts its second update from
what its first left -- one rank's, the same bits on one and two workers, stacked the same
as one at a time to float rounding; an update dropped as too stale still trains its
client's state; a resume continues bitwise with the personal state in a mapped file;
refusals in one line."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import mptrain
from mptrain.config import TrainConfig
from mptrain.strategies.fedbuff.clock import event_schedule, model_bytes_of
from mptrain.strategies.fedbuff.worker import step_cohorts, step_share

from fedavg_workload import RUN, make_data, make_model, make_test_data
from user_errors import fail

pytestmark = pytest.mark.timeout(180)


def run(**options):
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(60, 16), nn.Tanh(), nn.Linear(16, 10))
    settings = dict(strategy="fedbuff", workers=1, threads_per_worker=1, rounds=4,
                    concurrency=4, buffer_size=2, client_eval_every=2, seed=1, lr=0.05)
    settings.update(options)
    data = mptrain.load_data("synthetic:1,1", clients=8, seed=0)
    return mptrain.fit(model, data, **settings)


def test_finetuned_scores_beside_the_global_models_every_n_steps(tmp_path, capsys):
    plain = run()
    tuned = run(out=tmp_path, personalize="finetune:3", quiet=False)
    printed = capsys.readouterr().out
    for a, b in zip(plain.model.state_dict().values(), tuned.model.state_dict().values()):
        assert torch.equal(a, b)   # fine-tuning only changes the scores
    rows = [r.as_dict() for r in tuned.rounds]
    assert [r.get("client_acc_mean") is not None for r in rows] == [False, True, False, True]
    assert [r.get("client_acc_mean") for r in rows] == \
        [r.as_dict().get("client_acc_mean") for r in plain.rounds]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["client_eval_split"] == "test" and summary["personalize"] == "finetune:3"
    assert summary["clients_personalized"] == 8 == summary["clients_evaluated_personal"]
    assert summary["personal_acc_mean"] == rows[-1]["personal_acc_mean"]
    lines = [json.loads(line) for line in
             (tmp_path / "client_metrics.jsonl").read_text().splitlines()]
    assert sorted({(r["round"], r["client"]) for r in lines}) == \
        [(step, client) for step in (2, 4) for client in range(8)]
    last = torch.tensor([r["personal_accuracy"] for r in lines if r["round"] == 4],
                        dtype=torch.float64)
    assert summary["personal_acc_mean"] == pytest.approx(last.mean().item())
    assert "every client evaluated every 2 server steps, each on its own test split, " \
           "rows in client_metrics.jsonl" in printed
    assert "personalized: fine-tuning 3 local step(s) before each client is scored" in printed
    step_two = next(line for line in printed.splitlines() if line.startswith("round 2/4"))
    assert "clients acc" in step_two and "personal acc" in step_two


def test_personalize_alone_scores_the_last_step():
    rows = [r.as_dict() for r in run(client_eval_every=None, personalize="finetune:1").rounds]
    assert [r.get("personal_acc_mean") is not None for r in rows] == [False] * 3 + [True]


#: The tiny fedavg workload with every client in flight: in the first two steps clients
#: finish and are drawn again before the step, so they train twice from one version.
EVERY_CLIENT = {**{k: v for k, v in RUN.items() if k != "clients_per_round"},
                "strategy": "fedbuff", "concurrency": 12, "buffer_size": 6, "rounds": 3,
                "client_eval_every": 1, "vectorize_clients": "off", "workers": 1}


#: What one update of the workload's model moves, as the clock charges it.
MODEL_BYTES = model_bytes_of(sum(p.numel() for p in make_model().parameters()))


def fit(model=None, **options):
    return mptrain.fit(model or make_model(), make_data(), make_test_data(),
                       **{**EVERY_CLIENT, **options})


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                  b.state_dict().values()))


def scores(result, key="personal_acc_mean"):
    return [r.as_dict().get(key) for r in result.rounds]


def test_a_client_that_trains_twice_from_one_version_takes_its_state_along():
    config = TrainConfig.from_settings({**EVERY_CLIENT, "quiet": False})
    schedule = event_schedule(config, [20] * 12, MODEL_BYTES)   # iid: 12 x 20
    trains = [[u.client for u in schedule.plan(i).trains] for i in range(2)]
    assert all(len(t) > len(set(t)) for t in trains), trains   # the case under test
    # With personal state every update of a client is one rank's; spread one by one, the
    # first step's would not be (a race the two-worker run below might not show).
    first = schedule.plan(0).trains
    for whole, split in ((True, False), (False, True)):
        owners = [{u.client for u in step_share(first, [20] * 12, 2, rank, whole)}
                  for rank in range(2)]
        assert bool(owners[0] & owners[1]) == split
    one = fit(personalize="fedper:last:1")
    two = fit(personalize="fedper:last:1", workers=2)
    stacked = fit(personalize="fedper:last:1", vectorize_clients="on")
    assert same(one.model, two.model)
    assert scores(one) == scores(two) and scores(one, "personal_loss") == \
        scores(two, "personal_loss")
    # A cohort never holds one client twice: stacked, the same to float rounding.
    for a, b in zip(one.model.state_dict().values(), stacked.model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5)
    assert scores(stacked, "personal_loss") == pytest.approx(scores(one, "personal_loss"),
                                                             rel=1e-4)
    assert stacked.rounds[0].as_dict()["client_path"].startswith("vectorized")
    # The personal layer is never averaged: the global model keeps its initial one.
    assert torch.equal(one.model[2].weight, make_model()[2].weight)
    assert one.summary["clients_personalized"] == 12
    assert one.summary["personal_acc_mean"] > one.summary["client_acc_mean"]


def virtual_times(result):
    return [r.as_dict()["virtual_time_s"] for r in result.rounds]


def test_the_clock_charges_fedreps_head_and_dittos_model_and_fedrep_keeps_its_head():
    # An update takes the epochs it trains: FedRep's 2 head epochs and its body's 1 are
    # 3 epochs of a plain client, Ditto's personal model and its FedAvg update 2.
    fedrep = fit(personalize="fedrep:last:1", personal_head_epochs=2, rounds=2)
    assert virtual_times(fedrep) == virtual_times(fit(local_epochs=3, rounds=2))
    ditto = fit(personalize="ditto:0.5", rounds=2)
    assert virtual_times(ditto) == virtual_times(fit(local_epochs=2, rounds=2))
    assert torch.equal(fedrep.model[2].bias, make_model()[2].bias)   # never averaged
    assert fedrep.summary["personal_acc_mean"] is not None


def test_an_update_dropped_as_too_stale_still_trains_its_clients_state():
    config = TrainConfig.from_settings({**EVERY_CLIENT, "max_staleness": 0})
    schedule = event_schedule(config, [20] * 12, MODEL_BYTES)   # iid: 12 x 20
    applied = {u.client for i in range(3) for u in schedule.plan(i).trains}
    dropped = {u.client for i in range(3) for u in schedule.plan(i).trains_dropped}
    assert len(applied) < len(applied | dropped) == 12   # the case under test
    one = fit(personalize="fedper:last:1", max_staleness=0)
    stacked = fit(personalize="fedper:last:1", max_staleness=0, vectorize_clients="on")
    assert virtual_times(one) == [schedule.plan(i).time_s for i in range(3)]
    assert one.summary["clients_personalized"] == 12 == stacked.summary["clients_personalized"]
    assert scores(stacked, "personal_loss") == pytest.approx(scores(one, "personal_loss"),
                                                             rel=1e-4)


def test_a_resume_continues_bitwise_with_the_state_in_a_mapped_file(tmp_path, capsys):
    options = dict(personalize="ditto:0.5", personal_memory=0, out=tmp_path, quiet=False)
    whole = fit(**{**options, "out": tmp_path / "whole"})
    fit(**{**options, "rounds": 2}, checkpoint_every=1)
    assert "in a memory-mapped file" in capsys.readouterr().out
    resumed = fit(**options, resume=tmp_path, workers=2)
    assert same(whole.model, resumed.model)
    assert scores(whole)[-1] == scores(resumed)[-1]


def test_the_command_line_refuses_in_one_line(capsys):
    err = fail(["run", "--strategy", "fedbuff", "--personalize", "fedper:nope"], capsys)
    assert "fedper" in err and "nope" in err
    err = fail(["run", "--strategy", "fedbuff", "--personal-memory", "8"], capsys)
    assert "--personal-memory is about --personalize" in err


def test_every_update_of_a_client_is_one_ranks_in_order_and_never_two_in_a_cohort():
    from types import SimpleNamespace

    clients = [4, 3, 6, 3, 1, 3, 0, 6]
    trains = [SimpleNamespace(client=c, row=row) for row, c in enumerate(clients)]
    sizes = [5, 40, 9, 30, 7, 8, 20]
    shares = [step_share(trains, sizes, 3, rank, whole_clients=True) for rank in range(3)]
    assert sorted(u.row for share in shares for u in share) == list(range(8))
    for share in shares:
        assert [u.row for u in share] == sorted(u.row for u in share)   # schedule order
    owners = {c: {r for r, share in enumerate(shares) for u in share if u.client == c}
              for c in set(clients)}
    assert all(len(ranks) == 1 for ranks in owners.values())
    # Without personal state updates are spread one by one: client 3's go to two ranks.
    spread = [step_share(trains, sizes, 3, rank, whole_clients=False) for rank in range(3)]
    assert len({r for r, share in enumerate(spread) for u in share if u.client == 3}) > 1
    cohorts = step_cohorts(trains, 4, personal=True)
    assert [u.row for cohort in cohorts for u in cohort] == list(range(8))
    assert all(len({u.client for u in cohort}) == len(cohort) for cohort in cohorts)
    assert any(len({u.client for u in c}) < len(c) for c in step_cohorts(trains, 4, False))
