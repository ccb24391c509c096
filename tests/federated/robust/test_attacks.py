"""Attacking clients without processes: the seeded choice of attackers, each attack's
update, ALIE's z_max, and the parsing of --attack."""

import pytest
import torch

from mptrain.errors import UserError
from mptrain.federated.robust.attacks import (alie_rows_, alie_z, attack_row_, flip_labels,
                                       malicious_clients)
from mptrain.federated.robust.spec import AttackSpec, parse_attack


def test_malicious_clients_are_seeded_fixed_and_sized_by_the_fraction():
    chosen = malicious_clients(100, 0.2, seed=5)
    assert chosen == malicious_clients(100, 0.2, seed=5) == sorted(set(chosen))
    assert len(chosen) == 20 and all(0 <= c < 100 for c in chosen)
    assert chosen != malicious_clients(100, 0.2, seed=6)
    assert malicious_clients(100, 0.0, seed=5) == []
    assert len(malicious_clients(10, 0.25, seed=0)) == 3    # 2.5 rounded up
    # 0.58 x 25 is 14.499999999999998 in floating point: still a half, rounded up.
    assert len(malicious_clients(25, 0.58, seed=0)) == 15
    assert len(malicious_clients(11, 15 / 22, seed=0)) == 8  # 7.499999999999999
    with pytest.raises(UserError, match="is no client; give at least 0.01"):
        malicious_clients(100, 0.001, seed=0)
    # P < 1, but 0.96 x 10 rounds to every client: no honest client would be left.
    with pytest.raises(UserError, match="0.96 of 10 clients is every client: no honest "
                                        "client is left; give less than 0.95"):
        malicious_clients(10, 0.96, seed=0)
    assert len(malicious_clients(10, 0.94, seed=0)) == 9
    # One client: every P is no client or every client; the refusal says so, not
    # "give at least 1" (which then rounds to every client).
    with pytest.raises(UserError, match="an attack needs at least 2 clients"):
        malicious_clients(1, 0.3, seed=0)


def test_sign_flip_and_scaling_act_on_the_update_about_the_center():
    center = torch.tensor([1.0, 1.0, 1.0])
    trained = torch.tensor([1.5, 0.0, 1.0])   # update (0.5, -1, 0)
    flipped = attack_row_(AttackSpec("sign-flip"), trained.clone(), center, 0, 0, 0)
    assert flipped.tolist() == [0.5, 2.0, 1.0]
    flipped4 = attack_row_(AttackSpec("sign-flip", 4.0), trained.clone(), center, 0, 0, 0)
    assert flipped4.tolist() == [-1.0, 5.0, 1.0]
    scaled = attack_row_(AttackSpec("scaling", 10.0), trained.clone(), center, 0, 0, 0)
    assert scaled.tolist() == [6.0, -9.0, 1.0]


def test_gaussian_sends_seeded_noise_of_the_given_std_whatever_it_trained():
    center = torch.full((20000,), 3.0)
    first = attack_row_(AttackSpec("gaussian", 2.0), torch.zeros(20000), center, 1, 4, 7)
    again = attack_row_(AttackSpec("gaussian", 2.0), torch.ones(20000), center, 1, 4, 7)
    assert torch.equal(first, again)     # the trained row is ignored
    update = first - center
    assert abs(update.mean().item()) < 0.05 and abs(update.std().item() - 2.0) < 0.05
    other = attack_row_(AttackSpec("gaussian", 2.0), torch.zeros(20000), center, 1, 4, 8)
    assert not torch.equal(first, other)  # another client, other noise
    assert not AttackSpec("gaussian").trains and AttackSpec("sign-flip").trains


def test_label_flip_maps_y_to_classes_minus_one_minus_y():
    assert flip_labels(torch.tensor([0, 1, 9, 4]), 10).tolist() == [9, 8, 0, 5]
    assert AttackSpec("label-flip").trains
    row = torch.tensor([2.0])
    assert attack_row_(AttackSpec("label-flip"), row, torch.zeros(1), 0, 0, 0) is row
    assert row.item() == 2.0    # its (poisoned) training is the attack


def test_alie_z_is_the_papers_z_max():
    # Baruch et al.: n = 50, f = 12 -> s = 14, z = Phi^-1(36/50) ~ 0.58.
    assert alie_z(50, 12) == pytest.approx(0.5828, abs=1e-4)
    assert alie_z(20, 4) == pytest.approx(0.3853, abs=1e-4)   # s = 7: Phi^-1(0.65)
    assert alie_z(20, 15) > 1.6                                # s clamped to 1
    assert alie_z(1, 1) == 0.0


def test_alie_writes_mean_plus_z_std_of_the_honest_rows_into_the_attackers():
    rows = torch.tensor([[1.0, 0.0], [3.0, 0.0], [99.0, 99.0], [5.0, 6.0], [-7.0, -7.0]])
    alie_rows_(rows, honest=[0, 1, 3], malicious=[2, 4], z=1.5)
    mean = torch.tensor([3.0, 2.0])
    std = torch.tensor([[1.0, 0.0], [3.0, 0.0], [5.0, 6.0]]).std(dim=0)
    assert torch.allclose(rows[2], mean + 1.5 * std) and torch.equal(rows[2], rows[4])
    assert rows[0].tolist() == [1.0, 0.0]    # honest rows untouched
    lone = torch.tensor([[2.0], [8.0]])
    alie_rows_(lone, honest=[0], malicious=[1], z=3.0)
    assert lone[1].item() == 2.0              # one honest row: std 0
    none = torch.tensor([[2.0], [8.0]])
    alie_rows_(none, honest=[], malicious=[0, 1], z=3.0)
    assert none.tolist() == [[2.0], [8.0]]


@pytest.mark.parametrize("text, spec", [
    ("sign-flip", AttackSpec("sign-flip")), ("sign-flip:4", AttackSpec("sign-flip", 4.0)),
    ("gaussian", AttackSpec("gaussian")), ("gaussian:30", AttackSpec("gaussian", 30.0)),
    ("scaling:20", AttackSpec("scaling", 20.0)), ("label-flip", AttackSpec("label-flip")),
    ("ALIE", AttackSpec("alie")), ("alie:-1.5", AttackSpec("alie", -1.5))])
def test_parse_attack(text, spec):
    assert parse_attack(text) == spec


@pytest.mark.parametrize("text, words", [
    ("signflip", "did you mean 'sign-flip'"), ("gausian", "did you mean 'gaussian'"),
    ("nope", "choose one of sign-flip"), ("scaling", "needs its factor"),
    ("scaling:0", "LAMBDA > 0"), ("gaussian:-1", "STD > 0"), ("gaussian:x", "STD a number"),
    ("sign-flip:nan", "SCALE a number"), ("label-flip:2", "takes no parameter"),
    ("alie:inf", "finite Z"),
    # Past float32's range the attack's arithmetic overflows (gaussian raised a traceback).
    ("gaussian:1e39", "at most 3.4e+38"), ("sign-flip:1e39", "at most 3.4e+38"),
    ("scaling:-1e39", "LAMBDA > 0"), ("alie:-1e39", "at most 3.4e+38")])
def test_parse_attack_refuses_in_one_line(text, words):
    with pytest.raises(UserError) as err:
        parse_attack(text)
    assert words in str(err.value) and "\n" not in str(err.value)
