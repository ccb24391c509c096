"""``mptrain plot``: runs' metrics side by side in one PNG; what a run cannot give is one line,
exit 2."""

import json

import pytest

from mptrain.cli import main
from mptrain.report.compare import legend_labels, read_run

pytestmark = pytest.mark.timeout(60)

PNG = b"\x89PNG\r\n\x1a\n"


def write_run(folder, rows, **summary):
    """A run's --out folder as `mptrain run` leaves it: metrics.jsonl, summary.json."""
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if summary:
        (folder / "summary.json").write_text(json.dumps(summary))
    return str(folder)


def rows(accuracies, clock=True):
    return [{"epoch": i + 1, "round": i + 1, "train_loss": 1.0 / (i + 1),
             "test_accuracy": accuracy, "test_mse": None, "elapsed_s": 2.0 * (i + 1),
             "failed_clients": [], **({"virtual_time_s": 30.0 * (i + 1)} if clock else {})}
            for i, accuracy in enumerate(accuracies)]


@pytest.fixture
def two_runs(tmp_path):
    settings = dict(unit="round", data="digits", model="digits-cnn", lr=0.05, seed=0,
                    clients=20, wall_s=3.0, test_accuracy=0.7)
    sync = write_run(tmp_path / "sync", rows([0.3, 0.5, 0.7]), strategy="fedavg",
                     clients_per_round=10, **settings)
    # A round without an evaluation (--eval-every) is a null: no point, not a refusal.
    buff = write_run(tmp_path / "buff", rows([0.4, None, 0.8]), strategy="fedbuff",
                     clients_per_round=5, **{**settings, "wall_s": 9.0})
    return sync, buff


@pytest.mark.parametrize("x", ["round", "virtual_time", "wall"])
def test_runs_are_plotted_into_one_png_written_whole(two_runs, tmp_path, capsys, x):
    out = tmp_path / "figures" / "cmp.png"
    out.parent.mkdir()
    assert main(["plot", *two_runs, "--x", x, "--y", "test_accuracy", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    assert [p.name for p in out.parent.iterdir()] == ["cmp.png"]   # no temp file left
    assert f"wrote {out}" in capsys.readouterr().out


def test_the_default_name_says_what_is_plotted(two_runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", *two_runs, "--y", "train_loss"]) == 0
    assert (tmp_path / "train_loss-by-round.png").read_bytes()[:8] == PNG


def test_the_legend_names_the_strategy_and_the_settings_that_differ(two_runs):
    runs = [read_run(run) for run in two_runs]
    labels = legend_labels(runs, ["strategy", "lr", "seed", "clients", "clients_per_round"])
    # lr, seed, clients are the same in both; wall_s is a result, not a setting.
    assert labels == [f"{two_runs[0]}: fedavg, clients-per-round 10",
                      f"{two_runs[1]}: fedbuff, clients-per-round 5"]


def test_a_stopped_run_without_a_summary_is_plotted_under_its_name(tmp_path):
    run = write_run(tmp_path / "stopped", rows([0.2, 0.4]))
    assert legend_labels([read_run(run)], ["strategy"]) == [run]
    assert main(["plot", run, "--out", str(tmp_path / "s.png")]) == 0


def refusal(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(["plot", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_a_run_without_a_clock_has_no_virtual_time(two_runs, tmp_path, capsys):
    plain = write_run(tmp_path / "plain", rows([0.3], clock=False), strategy="fedavg")
    err = refusal([*two_runs, plain, "--x", "virtual_time", "--out", str(tmp_path / "v.png")],
                  capsys)
    assert err.startswith(f"mptrain: error: {plain} has no virtual time: run it with "
                          "--client-speeds")
    assert not (tmp_path / "v.png").exists()


def test_a_missing_metric_names_those_there_are(two_runs, tmp_path, capsys):
    err = refusal([*two_runs, "--y", "test_acc", "--out", str(tmp_path / "m.png")], capsys)
    assert "has no metric 'test_acc' (did you mean test_accuracy?)" in err
    # the numeric fields only: not failed_clients (a list), not test_mse (null throughout)
    assert err.rstrip().endswith("its metrics are: epoch, round, train_loss, test_accuracy, "
                                 "elapsed_s, virtual_time_s")


@pytest.mark.parametrize("make, message", [
    (lambda tmp: str(tmp / "absent"), "is not a folder"),
    (lambda tmp: (tmp / "empty").mkdir() or str(tmp / "empty"), "holds no metrics.jsonl"),
    (lambda tmp: write_run(tmp / "blank", []), "is empty: the run stopped before"),
])
def test_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys, make, message):
    assert message in refusal([make(tmp_path), "--out", str(tmp_path / "f.png")], capsys)


def test_out_must_be_a_png_in_a_folder_that_exists(two_runs, tmp_path, capsys):
    assert "must end in .png" in refusal([*two_runs, "--out", str(tmp_path / "f.pdf")], capsys)
    assert "does not exist" in refusal([*two_runs, "--out", str(tmp_path / "no" / "f.png")],
                                       capsys)
