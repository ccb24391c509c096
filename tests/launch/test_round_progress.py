"""The progress bar's in-round count: the board less what the ranks' reports covered --
their board counts, not their rounds' train_samples, which leave out work a rank posted
but the round does not count (a failed fedavg client, a retried cohort)."""

from mptrain.launch.board import ProgressBoard, RoundProgress


def test_work_a_round_does_not_count_does_not_run_the_next_round_ahead():
    board = ProgressBoard.create(2)
    first, second = board.writer(0), board.writer(1)
    progress = RoundProgress(board, per_round=100)
    first.advance(30)
    second.advance(20)
    assert progress.in_round() == 50
    # Round 1 ends: rank 0 trained 30 samples but a failed client's 10 of them are not
    # in its train_samples; its report carries the board's 30 all the same.
    first.advance(10)
    progress.reported(0, first.counted())
    progress.reported(1, second.counted())
    assert (first.counted(), second.counted()) == (40, 20)
    assert progress.in_round() == 0
    first.advance(5)
    assert progress.in_round() == 5


def test_the_count_stays_within_the_round():
    board = ProgressBoard.create(1)
    writer, progress = board.writer(0), RoundProgress(board, per_round=10)
    writer.advance(25)
    assert progress.in_round() == 10
    progress.reported(0, writer.counted())
    writer.advance(-3)   # a cohort that raised takes back what it counted
    assert progress.in_round() == 0
