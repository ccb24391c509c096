"""Robust aggregation's maths on hand-built updates, without processes: each rule's result
on known values, its indifference to planted outliers, and the sliced (block by block)
computation giving the bits of the whole-row one."""

import math

import pytest
import torch

from mptrain.errors import UserError
from mptrain.federated.robust import blocks, coordinate_wise, row_wise
from mptrain.federated.robust.rules import RobustRule
from mptrain.federated.robust.spec import AggregatorSpec, parse_aggregator
from robust_aggregate import aggregate


def honest_and_outliers(n_honest=12, f=3, d=50, seed=0, outlier=100.0):
    """``n_honest`` rows near 1.0 and ``f`` rows far away, outliers last."""
    generator = torch.Generator().manual_seed(seed)
    honest = 1.0 + 0.01 * torch.randn(n_honest, d, generator=generator)
    outliers = outlier + torch.randn(f, d, generator=generator)
    return torch.cat([honest, outliers]), honest


def rule(text, clients):
    return RobustRule(parse_aggregator(text), clients)


# -- known values --------------------------------------------------------------------------
def test_median_of_known_values_odd_and_even():
    rows = torch.tensor([[1.0, 5.0], [3.0, -1.0], [2.0, 0.0]])
    assert coordinate_wise.coordinate_median(rows).tolist() == [2.0, 0.0]
    rows = torch.tensor([[1.0], [4.0], [2.0], [10.0]])
    assert coordinate_wise.coordinate_median(rows).tolist() == [3.0]   # mean of the middle two


def test_trimmed_mean_cuts_floor_beta_n_from_each_end():
    rows = torch.tensor([[0.0], [1.0], [2.0], [3.0], [100.0]])
    assert coordinate_wise.trimmed_mean(rows, 0.2).tolist() == [2.0]      # cuts 0 and 100
    assert coordinate_wise.trimmed_mean(rows, 0.19).tolist() == pytest.approx([21.2])  # floor(.95) = 0
    assert coordinate_wise.trimmed_mean(rows, 0.0).tolist() == pytest.approx([21.2])


def test_krum_scores_by_hand():
    # Points on a line at 0, 1, 3, 10; f = 0 -> n - f - 2 = 2 nearest neighbours.
    points = torch.tensor([[0.0], [1.0], [3.0], [10.0]])
    distances = row_wise.squared_distances(row_wise.gram_matrix(points))
    assert distances.tolist() == [[0, 1, 9, 100], [1, 0, 4, 81], [9, 4, 0, 49],
                                  [100, 81, 49, 0]]
    assert row_wise.krum_scores(distances, 0).tolist() == [10, 5, 13, 130]
    assert row_wise.krum_select(distances, 0, 1) == [1]
    assert row_wise.krum_select(distances, 0, 3) == [1, 0, 2]


def test_pairwise_distances_are_one_gram_product_and_center_free():
    rows = torch.randn(6, 40, generator=torch.Generator().manual_seed(1))
    direct = torch.cdist(rows.double(), rows.double()) ** 2
    centered = row_wise.squared_distances(row_wise.gram_matrix(rows, rows[0]))
    assert torch.allclose(row_wise.squared_distances(row_wise.gram_matrix(rows)), direct,
                          atol=1e-9)
    assert torch.allclose(centered, direct, atol=1e-9)
    # Blocks of columns change nothing beyond rounding.
    assert torch.allclose(row_wise.gram_matrix(rows, block=7), row_wise.gram_matrix(rows),
                          atol=1e-12)


def test_weiszfeld_converges_to_known_geometric_medians():
    # Square's corners: the center.
    square = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    median, _ = aggregate(rule("geometric-median", 4), square, [1, 1, 1, 1])
    assert median.tolist() == pytest.approx([1.0, 1.0], abs=1e-6)
    # Triangle with all angles below 120 degrees: the Fermat point. For (0,0), (4,0),
    # (0,3)... use an isosceles one with a closed form: (-1,0), (1,0), (0,h) with h = 3:
    # the Fermat point is (0, 1/sqrt(3)) (120 degrees seen from it between each pair).
    triangle = torch.tensor([[-1.0, 0.0], [1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    median, _ = aggregate(rule("geometric-median", 3), triangle, [1, 1, 1])
    assert median.tolist() == pytest.approx([0.0, 1 / math.sqrt(3)], abs=1e-5)
    # On a line, weighted: the weighted median of the values (weight 3 on the middle).
    line = torch.tensor([[0.0], [1.0], [50.0]], dtype=torch.float64)
    median, plan = aggregate(rule("geometric-median", 3), line, [1, 3, 1])
    assert median.item() == pytest.approx(1.0, abs=1e-4) and plan.iterations >= 2


def test_weiszfeld_stops_on_a_short_step_and_at_the_cap():
    points = torch.randn(9, 5, generator=torch.Generator().manual_seed(3)).double()
    gram = row_wise.gram_matrix(points)
    coefficients, iterations = row_wise.weiszfeld(gram, [1.0] * 9)
    assert coefficients.sum().item() == pytest.approx(1.0)
    assert iterations < row_wise.WEISZFELD_MAX_ITERATIONS

    def z_after(steps):
        return row_wise.weiszfeld(gram, [1.0] * 9, rtol=0.0, max_iterations=steps)[0] @ points

    def scale(z):   # the median distance from z to the points
        return float((points - z).norm(dim=1).median())

    # Stopped at the first step of at most rtol of the median distance: the step before
    # was longer.
    z = coefficients @ points
    last, before = z - z_after(iterations - 1), z_after(iterations - 1) - z_after(iterations - 2)
    assert last.norm() <= row_wise.WEISZFELD_RTOL * scale(z_after(iterations - 1)) * 1.001
    assert before.norm() > row_wise.WEISZFELD_RTOL * scale(z_after(iterations - 2))
    _, capped = row_wise.weiszfeld(gram, [1.0] * 9, rtol=0.0, max_iterations=4)
    assert capped == 4
    # The result beats the mean on the objective, and is the reference's.
    objective = (points - z).norm(dim=1).sum()
    assert objective < (points - points.mean(0)).norm(dim=1).sum()
    assert torch.allclose(z, reference_geometric_median(points, [1.0] * 9), atol=1e-8)


def test_norm_bound_scales_long_updates_only_and_keeps_the_weighted_mean():
    center = torch.zeros(2)
    rows = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])   # norms 5, 0.5, 0
    result, plan = aggregate(rule("norm-bound:1", 3), rows, [1.0, 1.0, 2.0], center)
    # (0.6, 0.8) + (0.3, 0.4) + 2 * 0 over 4
    assert result.tolist() == pytest.approx([0.225, 0.3])
    assert plan.bounded == 1
    # About a center that is not 0: the same, shifted.
    shifted, _ = aggregate(rule("norm-bound:1", 3), rows + 7, [1.0, 1.0, 2.0],
                           center + 7)
    assert shifted.tolist() == pytest.approx([7.225, 7.3])


def test_bulyan_combine_averages_the_values_nearest_the_median():
    # theta = 5 values per column, f = 1 -> beta = 3 nearest the median 2.
    rows = torch.tensor([[0.0], [1.9], [2.0], [2.2], [9.0]])
    assert coordinate_wise.bulyan_combine(rows, 1).item() == pytest.approx((1.9 + 2.0 + 2.2) / 3)
    # Asymmetric: nearest to median 5 are 5, 5.5 and 6 (not the middle three 4, 5, 5.5).
    rows = torch.tensor([[0.0], [4.0], [5.0], [5.5], [6.0], [6.2], [50.0]])
    # theta = 7, f = 2 -> beta = 3; median 5.5: distances 5.5, 1.5, .5, 0, .5, .7, 44.5
    assert coordinate_wise.bulyan_combine(rows, 2).item() == pytest.approx((5.0 + 5.5 + 6.0) / 3)


# -- planted outliers ------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["median", "trimmed-mean:0.2", "krum:3", "multi-krum:3",
                                  "bulyan:3", "geometric-median"])
def test_robust_rules_ignore_planted_outliers(text):
    rows, honest = honest_and_outliers(n_honest=13, f=3)
    weights = [1.0] * len(rows)
    result, _ = aggregate(rule(text, len(rows)), rows, weights, torch.zeros(rows.shape[1]))
    mean, _ = aggregate(rule("mean", len(rows)), rows, weights)
    assert (result - honest.mean(0)).abs().max() < 0.05, text
    assert (mean - honest.mean(0)).abs().max() > 10   # the plain mean is dragged away


def test_krum_style_rules_select_no_outlier():
    rows, _ = honest_and_outliers(n_honest=13, f=3)
    n = len(rows)
    for text in ("krum:3", "multi-krum:3", "bulyan:3"):
        _, plan = aggregate(rule(text, n), rows, [1.0] * n)
        assert plan.selected and max(plan.selected) < 13, text
    _, plan = aggregate(rule("multi-krum:3", n), rows, [1.0] * n)
    assert len(plan.selected) == n - 3
    _, plan = aggregate(rule("multi-krum:3,5", n), rows, [1.0] * n)
    assert len(plan.selected) == 5
    _, plan = aggregate(rule("bulyan:3", n), rows, [1.0] * n)
    assert len(plan.selected) == n - 2 * 3


def test_norm_bound_keeps_a_scaled_update_from_moving_the_model():
    rows, honest = honest_and_outliers(n_honest=9, f=1, outlier=0.0)
    rows[-1] = 1000.0   # one boosted update
    center = torch.ones(rows.shape[1])
    result, plan = aggregate(rule("norm-bound:0.5", 10), rows, [1.0] * 10, center)
    assert plan.bounded >= 1
    assert (result - center).norm() <= 0.5 + 1e-5   # a mean of updates within C


def test_multi_krum_weighs_the_selected_by_data():
    rows = torch.tensor([[0.0], [1.0], [1.1], [0.9], [1.05], [50.0], [60.0]])
    weights = [1.0, 4.0, 1.0, 1.0, 2.0, 1.0, 1.0]
    result, plan = aggregate(rule("multi-krum:2,3", 7), rows, weights)
    chosen = list(plan.selected)
    expected = sum(weights[i] * rows[i, 0].item() for i in chosen) / \
        sum(weights[i] for i in chosen)
    assert result.item() == pytest.approx(expected)


# -- sliced like the server: block by block gives the bits of the whole ---------------------
@pytest.mark.parametrize("text", ["mean", "median", "trimmed-mean:0.1", "krum:2",
                                  "multi-krum:2", "bulyan:2", "norm-bound:0.3",
                                  "geometric-median"])
def test_blocks_of_columns_give_the_whole_rows_bits(text):
    generator = torch.Generator().manual_seed(7)
    rows = torch.randn(12, 101, generator=generator)
    weights = [float(w) for w in torch.randint(1, 9, (12,), generator=generator)]
    center = 0.1 * torch.randn(101, generator=generator)
    r = rule(text, 12)
    whole, plan = aggregate(r, rows, weights, center)
    pieces = [r.combine(rows[:, cols], weights, plan, center[cols])
              for cols in blocks.column_blocks(slice(0, 101), block=17)]
    assert torch.equal(torch.cat(pieces), whole), text


def test_mean_rule_has_the_bits_of_fedavgs_weighted_mean():
    from mptrain.federated.aggregate import aggregate_rows

    rows = torch.randn(7, 33, generator=torch.Generator().manual_seed(2))
    weights = [3.0, 1.0, 2.0, 5.0, 1.0, 1.0, 4.0]
    assert torch.equal(rule("mean", 7).combine(rows, weights), aggregate_rows(rows, weights))


# -- parsing and assumptions -----------------------------------------------------------------
@pytest.mark.parametrize("text, spec", [
    ("mean", AggregatorSpec("mean")), ("Median", AggregatorSpec("median")),
    ("trimmed-mean", AggregatorSpec("trimmed-mean")),
    ("trimmed-mean:0.2", AggregatorSpec("trimmed-mean", beta=0.2)),
    ("krum:4", AggregatorSpec("krum", f=4)), ("multi-krum", AggregatorSpec("multi-krum")),
    ("multi-krum:2,5", AggregatorSpec("multi-krum", f=2, m=5)),
    ("bulyan:1", AggregatorSpec("bulyan", f=1)),
    ("norm-bound:0.5", AggregatorSpec("norm-bound", bound=0.5)),
    ("geometric-median", AggregatorSpec("geometric-median"))])
def test_parse_aggregator(text, spec):
    assert parse_aggregator(text) == spec


@pytest.mark.parametrize("text, words", [
    ("krun", "did you mean 'krum'"), ("medain", "did you mean 'median'"),
    ("zzz", "choose one of mean"), ("krum:x", "whole number >= 0"),
    ("krum:-1", "whole number >= 0"), ("krum:1,2", "too many parameters"),
    ("multi-krum:1,0", "M is how many"), ("trimmed-mean:0.5", "0 <= BETA < 0.5"),
    ("trimmed-mean:-0.1", "0 <= BETA < 0.5"), ("trimmed-mean:abc", "BETA a number"),
    ("norm-bound", "needs its bound"), ("norm-bound:0", "C > 0"),
    ("norm-bound:inf", "C > 0"), ("median:3", "takes no parameter"),
    ("mean:", "takes no parameter")])
def test_parse_aggregator_refuses_in_one_line(text, words):
    with pytest.raises(UserError) as err:
        parse_aggregator(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_default_f_is_the_most_the_assumption_allows():
    assert rule("krum", 20).f == 8          # 20 > 2*8 + 2
    assert rule("multi-krum", 20).f == 8
    assert rule("bulyan", 20).f == 4        # 20 > 4*4 + 3
    assert rule("bulyan", 10).f == 1
    assert rule("krum", 3).f == 0


@pytest.mark.parametrize("text, clients, words", [
    ("krum:4", 10, "more than 2F+2 = 10 clients per round, got 10: give F <= 3"),
    ("bulyan:4", 19, "more than 4F+3 = 19 clients per round, got 19: give F <= 3"),
    # No F fits: the fix is the clients per round ("sample more clients or more
    # --clients-per-round" said it twice and gave no figure).
    ("bulyan", 3, "more than 4F+3 = 3 clients per round, got 3: give --clients-per-round "
                  "4 or more"),
    ("krum", 2, "got 2: give --clients-per-round 3 or more"),
    ("multi-krum:2,9", 10, "M 9 is more than 10 - 2 = 8: give M <= 8")])
def test_assumptions_refused_up_front(text, clients, words):
    with pytest.raises(UserError) as err:
        rule(text, clients)
    assert words in str(err.value)


def test_a_round_with_too_few_reports_is_named():
    r = rule("krum:4", 20)
    assert r.too_few(20) is None and r.too_few(0) is None
    assert r.too_few(10) == "10 clients reported; krum with F=4 needs more than 2F+2 = 10"
    assert rule("median", 20).too_few(1) is None


@pytest.mark.parametrize("n", list(range(1, 41)) + [70])
def test_sorting_network_sorts_like_torch(n):
    generator = torch.Generator().manual_seed(n)
    rows = torch.randint(-3, 4, (n, 257), generator=generator).float()   # many ties
    assert torch.equal(coordinate_wise.sort_columns(rows), rows.sort(dim=0).values)
    rows = torch.randn(n, 65, generator=generator)
    assert torch.equal(coordinate_wise.sort_columns(rows), rows.sort(dim=0).values)


@pytest.mark.parametrize("theta, f", [(5, 1), (6, 1), (7, 2), (12, 4), (13, 3), (3, 1), (9, 2),
                                      (16, 5)])
def test_bulyan_window_is_the_beta_values_nearest_the_median(theta, f):
    """Against the definition: sort by distance to the median (ties to the smaller
    value), keep beta, average."""
    generator = torch.Generator().manual_seed(theta * 31 + f)
    for rows in (torch.randint(-4, 5, (theta, 4000), generator=generator).float(),
                 torch.randint(-1, 2, (theta, 4000), generator=generator).float(),
                 torch.randn(theta, 400, generator=generator) ** 3):
        values = rows.double().sort(dim=0).values
        n = theta
        median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
        order = torch.sort((values - median).abs(), dim=0, stable=True).indices
        expected = values.gather(0, order[:theta - 2 * f]).mean(dim=0).float()
        assert torch.allclose(coordinate_wise.bulyan_combine(rows, f), expected, atol=1e-6)


def test_bulyan_late_selections_score_by_every_other_row():
    """With more attackers than F, Bulyan's last Krum steps run on a few rows where
    n - F - 2 < 1: they score by their distances to every other row, never by row order."""
    rows, _ = honest_and_outliers(n_honest=8, f=2)
    rows[9] *= -1                  # two independent attackers (as gaussian noise is), far
    rows = torch.cat([rows[8:], rows[:8]])        # from each other too, first in order
    chosen = row_wise.bulyan_select(row_wise.squared_distances(row_wise.gram_matrix(rows)), 1)
    assert len(chosen) == 8 and 0 not in chosen and 1 not in chosen


def test_the_banner_says_how_many_a_trimmed_mean_cuts():
    # beta 0.1 at 5 clients cuts nothing: the rule is then the unweighted mean, which the
    # banner said nowhere ("trimmed mean (beta 0.1)").
    assert rule("trimmed-mean:0.2", 20).describe() == \
        "trimmed mean (beta 0.2: 4 of 20 cut from each end)"
    assert rule("trimmed-mean", 5).describe() == \
        "trimmed mean (beta 0.1: 0 of 5 cut from each end, the unweighted mean: give " \
        "BETA >= 0.2 to cut one)"
    assert rule("trimmed-mean:0", 8).describe() == \
        "trimmed mean (beta 0: 0 of 8 cut from each end, the unweighted mean)"


def test_the_banner_says_how_many_reports_a_krum_style_round_needs():
    # With dropouts or Poisson sampling, F at its default maximum skips every round that
    # lacks a client (bulyan at 12 expected: F 2, 12 reports needed): said up front.
    assert rule("bulyan", 12).describe() == \
        "Bulyan (F 2: a round needs 12 reports, fewer is skipped)"
    assert rule("krum:1", 10).describe() == \
        "Krum (F 1: a round needs 5 reports, fewer is skipped)"
    assert rule("multi-krum:2,4", 10).describe() == \
        "Multi-Krum (F 2, M 4: a round needs 7 reports, fewer is skipped)"
    assert rule("multi-krum", 10).describe() == \
        "Multi-Krum (F 3, M = n - F: a round needs 9 reports, fewer is skipped)"


def reference_geometric_median(points, weights, iterations=3000):
    """Weiszfeld on the explicit vectors (float64), from the coordinate-wise median: slow
    and plain, the yardstick."""
    alphas = torch.as_tensor(weights, dtype=torch.float64)
    z = points.median(dim=0).values
    for _ in range(iterations):
        betas = alphas / (points - z).norm(dim=1).clamp(min=1e-12)
        z = (betas[:, None] * points).sum(0) / betas.sum()
    return z


@pytest.mark.parametrize("scale", [1e3, 1e12, 1e15, 1e30])
def test_the_geometric_median_holds_against_outliers_of_any_size(scale):
    # Two of ten updates far away (a gaussian attacker of huge STD). The objective is then
    # their distances' almost alone: RFA's test (the objective moving by < 1e-12 of itself)
    # stopped while the iterate was still ~1e-12 x scale from the honest updates -- 10^3
    # off at 1e15, and the model broke (seen: --attack gaussian:1e15 on MNIST).
    generator = torch.Generator().manual_seed(8)
    honest = torch.randn(8, 50, generator=generator, dtype=torch.float64)
    outliers = scale * torch.randn(2, 50, generator=generator, dtype=torch.float64)
    points = torch.cat([honest, outliers])
    weights = [1.0, 2.0, 1.0, 3.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0]
    median, plan = aggregate(rule("geometric-median", 10), points, weights)
    assert plan.iterations < row_wise.WEISZFELD_MAX_ITERATIONS
    expected = reference_geometric_median(points, weights)
    assert (median - expected).norm() < 1e-4 * honest.norm(dim=1).mean()
