"""``--logger mlflow``: one MLflow run per mptrain run, on the server of
``MLFLOW_TRACKING_URI`` or, without it, in a local store in ``--out/mlruns/`` (SQLite,
``mlflow ui --backend-store-uri sqlite:///DIR/mlruns/mlflow.db``). The settings are its
parameters, every round's numbers its metrics (step = epoch / round), the summary's numbers
``summary.*`` metrics, and model.pt, curves.png and summary.json its artifacts. A resumed
run continues the same MLflow run (its id is kept in ``--out/trackers.json``).

Only MLflow's client is used, with no background thread (the parent forks its workers
after this opens). Requests to a server give up quickly (no retries, a short timeout) so
that a dead server costs the run seconds, not MLflow's minutes of retries; a user's own
``MLFLOW_HTTP_REQUEST_*`` settings win.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ..environ import environment
from ..callbacks import logger_setting
from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from .common import (Tracker, ended_by_stop, hyperparameters, record_run, recorded_run,
                     scalars, simple)

#: Settings for our own requests only, unless the user set them.
QUICK_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
#: MLflow's longest parameter value.
_MAX_PARAM = 6000
_ARTIFACTS = ("model.pt", "curves.png", "summary.json")


class MlflowTracker(Tracker):
    name = "mlflow"
    library = "MLflow"

    def __init__(self, out_dir, tb_dir, warn):
        super().__init__(out_dir, tb_dir, warn)
        self.uri = os.environ.get("MLFLOW_TRACKING_URI") or local_store(out_dir)
        self.client = None
        self.run_id: str | None = None

    @classmethod
    def required_modules(cls):
        if os.environ.get("MLFLOW_TRACKING_URI", "").startswith(("http:", "https:")):
            return ("mlflow",)
        return ("mlflow", "sqlalchemy", "alembic")   # a database store, ours or the user's

    @classmethod
    def check_place(cls, out_dir, tb_dir):
        if out_dir is None and not os.environ.get("MLFLOW_TRACKING_URI"):
            raise UserError(f"{logger_setting()} mlflow needs {named('out')} DIR (a local "
                            "store in DIR/mlruns/) or MLFLOW_TRACKING_URI")

    def where(self):
        return f"mlflow {self.uri}"

    def on_run_start(self, config, run_info, resumed_at):
        params = {k: simple(v) for k, v in hyperparameters(config, run_info).items()}
        with quick_requests():
            self.client = open_client(self.uri)
            previous = recorded_run(self.out_dir, self.name) if resumed_at is not None \
                else None
            if previous and previous.get("tracking_uri") == self.uri:
                self.run_id = self._continue(previous["run_id"], params)
            if self.run_id is None:
                self.run_id = self._create(config, params)
        record_run(self.out_dir, self.name, {"run_id": self.run_id, "tracking_uri": self.uri})

    def on_round_end(self, row):
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(key, value, stamp, row["epoch"])
                   for key, value in scalars(row).items()]
        with quick_requests():
            self.client.log_batch(self.run_id, metrics=metrics)

    def on_end(self, summary, out_dir):
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        with quick_requests():
            self.client.log_batch(self.run_id, metrics=[
                Metric(f"summary.{key}", value, stamp, 0)
                for key, value in scalars(summary).items()])
            for name in _ARTIFACTS if out_dir is not None else ():
                path = Path(out_dir) / name
                if path.is_file():
                    self.client.log_artifact(self.run_id, str(path))
            self.client.set_terminated(self.run_id, "FINISHED")

    def on_abort(self, error):
        if self.run_id is not None:
            with quick_requests():
                self.client.set_terminated(self.run_id,
                                           "KILLED" if ended_by_stop(error) else "FAILED")

    def _create(self, config, params: dict) -> str:
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "mptrain")
        experiment = self.client.get_experiment_by_name(experiment_name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            artifacts = None
            if self.uri == local_store(self.out_dir):
                artifacts = (Path(self.out_dir).resolve() / "mlruns" / "artifacts").as_uri()
            experiment_id = self.client.create_experiment(experiment_name,
                                                          artifact_location=artifacts)
        strategy = getattr(config, "strategy", None) or getattr(config, "algo", "")
        run = self.client.create_run(
            experiment_id, run_name=self.out_dir.name if self.out_dir else None,
            tags={"mptrain.strategy": str(strategy)})
        self._log_params(run.info.run_id, params)
        return run.info.run_id

    def _continue(self, run_id: str, params: dict) -> str | None:
        """Reopen the run a resumed run continues; None if the store no longer has it.
        MLflow keeps a parameter's first value: a setting changed on resuming (more
        epochs) is noted in the tag ``mptrain.resumed_with``."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        self.client.update_run(run_id, status="RUNNING")
        logged = run.data.params
        self._log_params(run_id, {k: v for k, v in params.items() if k not in logged})
        changed = [f"{k}={v}" for k, v in params.items()
                   if k in logged and logged[k] != str(v)[:_MAX_PARAM]]
        if changed:
            self.client.set_tag(run_id, "mptrain.resumed_with", " ".join(changed)[:5000])
        return run_id

    def _log_params(self, run_id: str, params: dict) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:_MAX_PARAM]) for k, v in params.items()]
        for start in range(0, len(items), 100):   # MLflow takes 100 parameters a batch
            self.client.log_batch(run_id, params=items[start:start + 100])


def local_store(out_dir: Path | None) -> str | None:
    if out_dir is None:
        return None
    return "sqlite:///" + str(Path(out_dir).resolve() / "mlruns" / "mlflow.db")


def open_client(uri: str):
    """An MlflowClient on ``uri``, without MLflow's telemetry or its chatter on stderr."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # Creating a store's tables logs INFO lines through alembic and MLflow's db utils.
    for name in ("alembic", "mlflow.store.db.utils"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def quick_requests():
    """QUICK_HTTP in the environment (where MLflow reads it, per request) while our own
    requests run, as the user had it after; the user's own settings win."""
    return environment(QUICK_HTTP, keep_set=True)

