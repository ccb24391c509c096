"""TensorBoard: every round's numbers as scalars (step = round), the settings in the
HParams dashboard, summary numbers and curves.png at the end, read back with TensorBoard's
own EventAccumulator."""

import pytest

from tracker_runs import EPOCHS, scalar_rows
from tracker_readers import tb_accumulator, tb_hparams, tb_scalars, tb_session_status

pytest.importorskip("tensorboard")


def assert_rounds_match(folder, out):
    written = tb_scalars(folder)
    for round_, numbers in scalar_rows(out).items():
        for key, value in numbers.items():
            assert (round_, pytest.approx(value, rel=1e-6)) in written[key], (key, round_)
    return written


def test_supervised_run_scalars_hparams_and_end(supervised_run):
    out, result = supervised_run
    written = assert_rounds_match(out / "tb", out)
    assert [step for step, _ in written["test_accuracy"]] == list(range(1, EPOCHS + 1))
    assert written["summary/test_accuracy"][-1][1] == pytest.approx(result.test_accuracy)
    hparams = tb_hparams(out / "tb")
    assert hparams["strategy"] == "single" and hparams["lr"] == pytest.approx(0.05)
    assert hparams["epochs"] == EPOCHS
    assert tb_session_status(out / "tb") == "STATUS_SUCCESS"
    assert tb_accumulator(out / "tb").Tags()["images"] == ["curves"]


def test_fedavg_rounds_carry_the_client_statistics(fedavg_run):
    out, _ = fedavg_run
    written = assert_rounds_match(out / "tb", out)
    assert [step for step, _ in written["mean_client_loss"]] == [1, 2]
    assert [value for _, value in written["clients"]] == [2, 2]


def test_rl_rounds_carry_returns_and_steps(rl_run):
    out, _ = rl_run
    written = assert_rounds_match(out / "tb", out)
    assert [value for _, value in written["env_steps"]] == [200, 400]
    assert "eval_return" in written and "return_mean" in written
    assert tb_hparams(out / "tb")["algo"] == "a3c"


def test_a_resumed_run_continues_the_steps_in_the_same_folder(resumed_run):
    out, _, _ = resumed_run
    assert len(list((out / "tb").glob("events.out.tfevents.*"))) == 2
    written = tb_scalars(out / "tb")
    # Round 3 of the failed attempt is dropped: the resumed run redid it from round 2.
    assert [step for step, _ in written["train_loss"]] == [1, 2, 3, 4]
    assert_rounds_match(out / "tb", out)
    assert tb_session_status(out / "tb") == "STATUS_SUCCESS"


def test_tb_dir_puts_the_events_elsewhere(tmp_path):
    import mptrain
    from tracker_runs import RECIPE, make_data, make_model

    train, test = make_data()
    mptrain.fit(make_model(), train, test, epochs=1, loggers="tensorboard",
                tb_dir=tmp_path / "board", **RECIPE)
    assert [s for s, _ in tb_scalars(tmp_path / "board")["train_loss"]] == [1]
