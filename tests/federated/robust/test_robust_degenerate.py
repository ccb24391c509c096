"""Every rule on the rounds that break naive code: all updates equal, one client, the
smallest n each rule's assumption allows, ties -- the result is the obvious one, finite and
bitwise where it must be."""

import pytest
import torch

from mptrain.federated.robust.rules import RobustRule, fewest_clients
from mptrain.federated.robust.spec import parse_aggregator
from robust_aggregate import aggregate

RULES = ["mean", "median", "trimmed-mean:0.2", "krum:1", "multi-krum:1", "bulyan:1",
         "norm-bound:0.5", "geometric-median"]


def rule(text, clients):
    return RobustRule(parse_aggregator(text), clients)


@pytest.mark.parametrize("text", RULES)
def test_equal_updates_aggregate_to_that_update_bitwise(text):
    r = rule(text, 10)
    row = torch.randn(300, generator=torch.Generator().manual_seed(4))
    for n in range(fewest_clients(r.name, r.f or 0), 11):
        rows = row.repeat(n, 1)
        weights = [float(i % 3 + 1) for i in range(n)]
        # norm bounding measures lengths about the center: the same point, a zero update.
        center = row.clone() if r.name == "norm-bound" else torch.zeros(300)
        result, _ = aggregate(r, rows, weights, center)
        assert torch.equal(result, row), (text, n)


@pytest.mark.parametrize("text", ["mean", "median", "trimmed-mean:0.2", "norm-bound:100",
                                  "geometric-median"])
def test_one_client_is_its_own_aggregate(text):
    row = torch.randn(1, 40, generator=torch.Generator().manual_seed(5))
    result, _ = aggregate(rule(text, 1), row, [7.0], torch.zeros(40))
    assert torch.allclose(result, row[0], atol=1e-6)


@pytest.mark.parametrize("text", RULES)
def test_the_fewest_clients_allowed_give_a_finite_robust_result(text):
    r = rule(text, 20)
    n = max(fewest_clients(r.name, r.f or 0), 3)
    generator = torch.Generator().manual_seed(6)
    rows = 1.0 + 0.01 * torch.randn(n, 64, generator=generator)
    result, _ = aggregate(r, rows, [1.0] * n, torch.zeros(64))
    assert torch.isfinite(result).all()
    if r.name != "norm-bound":
        assert (result - 1.0).abs().max() < 0.05, text


@pytest.mark.parametrize("text", ["krum:1", "multi-krum:1,1", "bulyan:1"])
def test_equal_scores_go_to_the_lowest_client_whatever_the_values(text):
    # Two pairs of equal rows, mirror images: every Krum score is the same.
    rows = torch.tensor([[0.0], [0.0], [1.0], [1.0], [0.0], [1.0], [0.0], [1.0]])
    result, plan = aggregate(rule(text, 8), rows, [1.0] * 8)
    assert plan.selected[0] == 0 and result.isfinite().all()
