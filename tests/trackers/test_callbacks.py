"""The callback interface: the order of events in a real run, the row each round hands
over, trackers isolated from the run, the user's callbacks not."""

import json

import pytest

import mptrain
from mptrain.callbacks import Callback, CallbackList
from tracker_runs import RECIPE, StopAtRound, make_data, make_model


class Recorder(Callback):
    def __init__(self):
        self.events = []

    def on_run_start(self, config, run_info, resumed_at):
        self.events.append(("start", config.epochs, resumed_at))

    def on_round_end(self, row):
        self.events.append(("round", row))

    def on_checkpoint(self, path, round):
        self.events.append(("checkpoint", path.name, round))

    def on_end(self, summary, out_dir):
        self.events.append(("end", summary["epochs"], out_dir))

    def on_abort(self, error):
        self.events.append(("abort", type(error).__name__))


class Failing(Callback):
    """A tracker that fails at one event."""

    name = "failing"

    def __init__(self, event, after=0):
        self.event, self.after, self.calls = event, after, []

    def __getattribute__(self, name):
        if name.startswith("on_"):
            def method(*args):
                self.calls.append(name)
                if name == self.event and self.calls.count(name) > self.after:
                    raise OSError(28, "No space left on device")
            return method
        return object.__getattribute__(self, name)


def test_events_come_in_order_with_the_rows_of_metrics_jsonl(tmp_path):
    train, test = make_data()
    recorder = Recorder()
    out = tmp_path / "run"
    mptrain.fit(make_model(), train, test, out=out, epochs=2, checkpoint_every=1,
                callbacks=[recorder], **RECIPE)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert recorder.events == [("start", 2, None),
                               ("round", rows[0]), ("checkpoint", "checkpoint.pt", 1),
                               ("round", rows[1]), ("checkpoint", "checkpoint.pt", 2),
                               ("end", 2, out)]


def test_a_resumed_run_says_where_it_resumes_and_a_failed_one_aborts(tmp_path):
    train, test = make_data()
    out, first, second = tmp_path / "run", Recorder(), Recorder()
    with pytest.raises(RuntimeError):
        mptrain.fit(make_model(), train, test, out=out, epochs=3, checkpoint_every=1,
                    callbacks=[first, StopAtRound(2)], **RECIPE)
    # Round 2's checkpoint is written, but the run stops in the callback before saying so.
    assert [e[0] for e in first.events] == ["start", "round", "checkpoint", "round", "abort"]
    assert first.events[-1] == ("abort", "RuntimeError")
    mptrain.fit(make_model(), train, test, resume=out, callbacks=second, quiet=True)
    assert second.events[0] == ("start", 3, 2)
    assert [e[1]["epoch"] for e in second.events if e[0] == "round"] == [3]


def test_without_out_rounds_and_end_still_come(tmp_path):
    train, test = make_data()
    recorder = Recorder()
    mptrain.fit(make_model(), train, test, epochs=1, callbacks=[recorder], **RECIPE)
    assert [e[0] for e in recorder.events] == ["start", "round", "end"]
    assert recorder.events[-1] == ("end", 1, None)


def test_a_failing_tracker_is_reported_once_and_switched_off():
    warnings, user = [], Recorder()
    broken, fine = Failing("on_round_end", after=1), Recorder()
    callbacks = CallbackList([broken, fine], [user], warn=warnings.append)
    callbacks.on_run_start(type("Config", (), {"epochs": 3})(), {}, None)
    for epoch in (1, 2, 3):
        callbacks.on_round_end({"epoch": epoch})
    callbacks.on_end({"epochs": 3}, None)
    assert broken.calls == ["on_run_start", "on_round_end", "on_round_end"]
    assert len(warnings) == 1
    assert warnings[0].startswith("--logger failing failed (on_round_end: OSError: ")
    assert "the run goes on without it" in warnings[0] and "\n" not in warnings[0]
    assert [e[0] for e in fine.events] == [e[0] for e in user.events] == \
        ["start", "round", "round", "round", "end"]
    assert callbacks.active_trackers == [fine]


def test_a_user_callback_error_propagates():
    callbacks = CallbackList([], [Failing("on_end")])
    with pytest.raises(OSError):
        callbacks.on_end({}, None)


def test_a_tracker_failing_mid_run_leaves_the_run_and_the_other_trackers_whole(
        tmp_path, monkeypatch, capfd):
    pytest.importorskip("tensorboard")
    from mptrain.trackers import tb_events

    original = tb_events.EventFile.scalars

    def full_disk_at_round_2(self, step, values):
        if step == 2:
            raise OSError(28, "No space left on device")
        original(self, step, values)

    monkeypatch.setattr(tb_events.EventFile, "scalars", full_disk_at_round_2)
    train, test = make_data()
    out = tmp_path / "run"
    result = mptrain.fit(make_model(), train, test, out=out, epochs=3,
                         loggers=["tensorboard", "csv"], **RECIPE)
    assert len(result.epochs) == 3
    err = capfd.readouterr().err
    assert err.count("--logger tensorboard failed") == 1, err
    assert "No space left on device" in err
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    assert len((out / "metrics.csv").read_text().splitlines()) == 4
    assert (out / "summary.json").is_file()


def test_user_callbacks_run_only_where_the_run_is_presented(tmp_path):
    """Under torchrun only rank 0 logs: the other ranks get no trackers, no callbacks."""
    from mptrain.runner import RunRequest, make_callbacks

    class OtherRank:
        writes_outputs = False

    request = RunRequest(config=None, strategy=None, launcher=OtherRank(), model=None,
                         family=None, out=tmp_path, loggers=("csv",), callbacks=[Recorder()])
    callbacks = make_callbacks(request, presenter=type("P", (), {"note": print})())
    assert callbacks.trackers == [] and callbacks.callbacks == [] and not callbacks


class CtrlCAtRound(Callback):
    def on_round_end(self, row):
        if row["epoch"] == 2:
            raise KeyboardInterrupt


def test_a_stopped_run_ends_its_tracker_runs_as_stopped(tmp_path):
    from mptrain.errors import RunInterrupted
    from tracker_readers import installed_loggers, wandb_run

    train, test = make_data()
    out, recorder = tmp_path / "run", Recorder()
    with pytest.raises(RunInterrupted):
        mptrain.fit(make_model(), train, test, out=out, epochs=3,
                    loggers=installed_loggers(), callbacks=[recorder, CtrlCAtRound()],
                    **RECIPE)
    assert recorder.events[-1] == ("abort", "RunInterrupted")
    if "mlflow" in installed_loggers():
        from tracker_readers import mlflow_run

        assert mlflow_run(out)[1].info.status == "KILLED"
    if "wandb" in installed_loggers():
        assert wandb_run(out)["exit_codes"] == [130]


def test_a_tracker_failure_with_a_long_message_is_one_line_cut_at_a_sentence():
    from types import SimpleNamespace

    from mptrain.callbacks import describe_failure

    message = ("The server refused the metric. " * 12) + "\nTraceback follows\n  more"
    line = describe_failure(SimpleNamespace(name="mlflow"), "on_round",
                            ConnectionError(message))
    assert "\n" not in line and "Traceback" not in line
    assert "(on_round: ConnectionError: The server refused the metric." in line
    assert "metric. The server refused the metric.); the run goes on" in line
    assert len(line) < 300


def test_a_stop_that_a_trackers_cleanup_replaced_stops_the_run():
    # A tracker's exception switches it off and the run goes on; a Ctrl-C landing in a
    # tracker, whose own cleanup then raised in its place, was taken for a tracker's
    # failure and lost: the run trained on.
    class CutShort(Callback):
        name = "cut-short"

        def on_round_end(self, row):
            try:
                raise KeyboardInterrupt
            finally:
                raise RuntimeError("the tracker's cleanup, cut short")

    warnings = []
    callbacks = CallbackList([CutShort()], [], warn=warnings.append)
    with pytest.raises(KeyboardInterrupt):
        callbacks.on_round_end({"epoch": 1})
    assert warnings == []
