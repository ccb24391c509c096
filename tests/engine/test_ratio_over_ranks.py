import pytest

from mptrain.comm.solo import SoloGroup
from mptrain.engine.evaluation import ratio_over_ranks


class ThreeRanks(SoloGroup):
    """Rank 0 of three whose peers contributed ``others`` ([numerator, count] summed)."""

    world_size = 3

    def __init__(self, others):
        self.others = others

    def average_(self, tensors):
        for tensor in tensors:
            tensor.add_(tensor.new_tensor(self.others)).div_(3)


def test_accuracy_over_ranks_is_the_exact_quotient_of_the_sums():
    group = ThreeRanks([5, 9])   # 2/3 correct here, 5 of 9 on the others
    assert ratio_over_ranks(group, 2, 3, empty=0.0, numerator_is_count=True) == 7 / 12


def test_mean_of_float_values_over_ranks():
    group = ThreeRanks([1.5, 2])
    assert ratio_over_ranks(group, 1.0, 1, empty=0.0) == pytest.approx(2.5 / 3)


@pytest.mark.parametrize("empty", [0.0, float("-inf")])
def test_no_counts_anywhere_gives_empty(empty):
    assert ratio_over_ranks(SoloGroup(), 0, 0, empty=empty) == empty
