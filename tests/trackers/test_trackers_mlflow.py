"""MLflow: one run per mptrain run in a local SQLite store under --out/mlruns (or the
server of MLFLOW_TRACKING_URI), read back with MlflowClient."""

import time

import pytest

from tracker_runs import EPOCHS, RECIPE, make_data, make_model, scalar_rows
from tracker_readers import mlflow_history, mlflow_run

pytest.importorskip("mlflow")
pytest.importorskip("sqlalchemy")
pytest.importorskip("alembic")


def assert_rounds_match(client, run, out):
    for round_, numbers in scalar_rows(out).items():
        for key, value in numbers.items():
            assert (round_, pytest.approx(value, rel=1e-9)) in \
                mlflow_history(client, run.info.run_id, key), (key, round_)


def test_supervised_run_params_metrics_artifacts(supervised_run):
    out, result = supervised_run
    client, run = mlflow_run(out)
    assert run.info.status == "FINISHED"
    assert run.data.params["strategy"] == "single" and run.data.params["epochs"] == "3"
    assert run.info.run_name == "run"
    assert_rounds_match(client, run, out)
    assert [s for s, _ in mlflow_history(client, run.info.run_id, "test_accuracy")] == \
        list(range(1, EPOCHS + 1))
    assert run.data.metrics["summary.test_accuracy"] == pytest.approx(result.test_accuracy)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {"model.pt", "curves.png", "summary.json"}
    assert (out / "mlruns" / "mlflow.db").is_file()


def test_fedavg_run(fedavg_run):
    out, _ = fedavg_run
    client, run = mlflow_run(out)
    assert run.data.params["strategy"] == "fedavg" and run.data.params["clients"] == "4"
    assert_rounds_match(client, run, out)
    assert [s for s, _ in mlflow_history(client, run.info.run_id, "round_s")] == [1, 2]


def test_rl_run(rl_run):
    out, _ = rl_run
    client, run = mlflow_run(out)
    assert run.data.params["algo"] == "a3c" and run.data.params["env"] == "CartPole-v1"
    assert_rounds_match(client, run, out)
    assert run.info.status == "FINISHED"


def test_a_resumed_run_continues_the_same_mlflow_run(resumed_run):
    out, _, first = resumed_run
    client, run = mlflow_run(out)
    import json

    assert json.loads(first)["mlflow"]["run_id"] == run.info.run_id
    assert len(client.search_runs([run.info.experiment_id])) == 1
    assert run.info.status == "FINISHED"
    steps = [s for s, _ in mlflow_history(client, run.info.run_id, "train_loss")]
    assert sorted(set(steps)) == [1, 2, 3, 4]
    assert_rounds_match(client, run, out)


def test_a_dead_server_costs_seconds_and_one_line(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    train, test = make_data()
    started = time.monotonic()
    result = mptrain_fit(train, test, out=tmp_path / "run", epochs=2, loggers="mlflow,csv")
    assert time.monotonic() - started < 60
    err = capfd.readouterr().err
    # fit() is told its own keyword, loggers
    warnings = [line for line in err.splitlines() if "loggers mlflow failed" in line]
    assert len(warnings) == 1, err
    assert len(result.epochs) == 2
    assert len((tmp_path / "run" / "metrics.csv").read_text().splitlines()) == 3
    # Our short-lived request settings are not left in the environment.
    import os
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


def mptrain_fit(train, test, **options):
    import mptrain

    return mptrain.fit(make_model(), train, test, **{**RECIPE, **options})
