"""Each client scored on its own test split in a fedbuff run (``--client-eval-every``), and
``--personalize finetune:STEPS`` before it: the figures, client_metrics.jsonl's rows, the
console and the banner say what fedavg's rounds say, and fine-tuning leaves the global
model bit for bit as it was."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import mptrain

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


def test_the_command_line_refuses_personal_state_in_one_line(capsys):
    err = fail(["run", "--strategy", "fedbuff", "--personalize", "ditto:0.1"], capsys)
    assert "--personalize ditto keeps a personal state on each client" in err
    assert "--personalize finetune:STEPS, or train ditto with --strategy fedavg" in err
