"""Real fedavg runs (tiny data, one process) of what the audit of issue 41 found: what a
run with a robust rule or an attack reports and weighs, end to end."""


import pytest
import torch

import mptrain

from fedavg_workload import RUN, make_data, make_model, make_test_data  # noqa: E402

pytestmark = pytest.mark.timeout(180)
ATTACKED = dict(clients=12, clients_per_round=10, malicious_fraction=0.25)


def fit(**options):
    return mptrain.fit(make_model(), make_data(), make_test_data(),
                       **{**RUN, "workers": 1, **ATTACKED, **options})


def test_an_alie_update_past_float32_is_dropped_counted_and_named(capsys):
    # At lr 20 the honest updates spread by more than 1 in some coordinate: Z std with
    # Z 3e38 is past float32 and the forged rows are inf (the geometric median made the
    # model NaN from them).
    result = fit(aggregator="geometric-median", attack="alie:3e38", lr=20.0, rounds=2,
                 quiet=False)
    assert all(torch.isfinite(p).all() for p in result.model.state_dict().values())
    rows = [m.as_dict() for m in result.rounds]
    assert all(row["forged_nonfinite"] == row["malicious"] == 3 for row in rows)
    assert all(row["malicious_reported"] == 0 for row in rows)
    shown = capsys.readouterr()
    assert "round 1: ALIE's forged update (mean + Z std) is past float32; its 3 " \
           "attacker(s) were dropped" in shown.out + shown.err


def flat(model) -> torch.Tensor:
    from mptrain.strategies.model_state import floating_state

    return torch.cat([t.detach().reshape(-1).double() for t in floating_state(model)])


def test_an_attacker_that_forges_claims_the_weight_an_honest_client_of_its_size_would():
    # Honest clients weigh the samples they trained: local_epochs x their size. A gaussian
    # attacker trains nothing and claimed its size once: at 2 local epochs half an honest
    # client's weight in every weighted rule. The mean's result is linear in STD:
    # (model(STD 2) - model(STD 1)) = sum_a w_a noise_a / sum_i w_i.
    from mptrain.federated.robust.attacks import attack_row_, malicious_clients
    from mptrain.federated.robust.spec import AttackSpec

    options = dict(clients=12, clients_per_round=12, rounds=1, local_epochs=2)
    one = flat(fit(attack="gaussian:1", **options).model)
    two = flat(fit(attack="gaussian:2", **options).model)
    attackers = malicious_clients(12, 0.25, seed=0)
    noise = sum(attack_row_(AttackSpec("gaussian", 1.0), torch.zeros(len(one)),
                            torch.zeros(len(one)), 0, 0, a).double() for a in attackers)
    # 12 IID clients of 20 samples each: every client's weight is 2 x 20.
    assert torch.allclose(two - one, noise * 40 / (12 * 40), atol=1e-5)
