"""``--logger wandb``: one Weights & Biases run per mptrain run, offline unless you have set
W&B up (``WANDB_MODE``, or ``WANDB_API_KEY``): files in ``--out/wandb/`` that ``wandb sync``
uploads later, so no network is needed. The settings are its config, every round's numbers
its history (against ``epoch``), the summary's numbers its summary, curves.png an image and
model.pt a model artifact. A resumed run continues the same W&B run (same id, kept in
``--out/trackers.json``).

W&B starts threads and a service process of its own. The run is opened at the first round's
end, once the workers are running, rather than before they are forked; a worker restart
forks again with those threads alive, which the workers never touch (they share no lock
with them: W&B's threads talk to its service over a socket).
"""

from __future__ import annotations

import os
from pathlib import Path

from .common import Tracker, ended_by_stop, hyperparameters, record_run, recorded_run, scalars


class WandbTracker(Tracker):
    name = "wandb"
    library = "Weights & Biases"

    def __init__(self, out_dir, tb_dir, warn):
        super().__init__(out_dir, tb_dir, warn)
        self.run = None
        self._pending: dict | None = None   # wandb.init's arguments, until it is called

    @classmethod
    def required_modules(cls):
        return ("wandb",)

    def where(self):
        return f"wandb ({mode()}) {self.out_dir / 'wandb' if self.out_dir else ''}".rstrip()

    def on_run_start(self, config, run_info, resumed_at):
        previous = recorded_run(self.out_dir, self.name) if resumed_at is not None else None
        run_id = previous.get("run_id") if previous else None
        if not isinstance(run_id, str):
            run_id = new_run_id()
        self._pending = {"id": run_id, "config": hyperparameters(config, run_info)}
        record_run(self.out_dir, self.name, {"run_id": run_id})

    def on_round_end(self, row):
        self._open()
        self.run.log({"epoch": row["epoch"], **scalars(row)})

    def on_end(self, summary, out_dir):
        import wandb

        self._open()
        self.run.summary.update(scalars(summary))
        folder = Path(out_dir) if out_dir is not None else None
        if folder is not None and (folder / "curves.png").is_file():
            self.run.log({"curves": wandb.Image(str(folder / "curves.png"))})
        if folder is not None and (folder / "model.pt").is_file():
            artifact = wandb.Artifact(f"model-{self.run.id}", type="model")
            artifact.add_file(str(folder / "model.pt"))
            self.run.log_artifact(artifact)
        self._finish(0)

    def on_abort(self, error):
        if self.run is not None:
            self._finish(130 if ended_by_stop(error) else 1)

    def _finish(self, exit_code: int) -> None:
        import wandb

        self.run.finish(exit_code=exit_code)
        if wandb.run is None:
            # No run of the caller's own: stop W&B's service process too, as mptrain
            # leaves no process behind (W&B would keep it until the interpreter exits).
            wandb.teardown()

    def _open(self) -> None:
        if self.run is not None:
            return
        import wandb

        if mode() == "offline":
            no_analytics()
        folder = self.out_dir
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        # console off: mptrain's console stays as it is; create_new: a run of the caller's
        # own (wandb.run) is neither finished nor replaced.
        settings = wandb.Settings(console="off", silent=True, x_disable_stats=True,
                                  save_code=False, reinit="create_new")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "mptrain"),
            name=self.out_dir.name if self.out_dir else None, id=self._pending["id"],
            resume="allow", config=self._pending["config"], mode=mode(),
            dir=str(folder) if folder is not None and not os.environ.get("WANDB_DIR") else None,
            settings=settings)
        # Rounds, not wandb's own step counter, are the x axis: a resumed or restarted run
        # logs rounds again that W&B's step has passed.
        self.run.define_metric("*", step_metric="epoch")


def mode() -> str:
    """offline unless the user chose (WANDB_MODE) or set W&B up (an API key)."""
    chosen = os.environ.get("WANDB_MODE")
    if chosen:
        return chosen
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def no_analytics() -> None:
    """Offline means no network. W&B records usage analytics through the process-wide
    settings, not the run's: logging an artifact from an offline run still starts
    OpenTelemetry export threads that post to W&B's servers, and without a network they
    hang W&B's teardown (and a fork copies them into every worker). W&B's own switch turns
    them off for the process; it is internal, so a W&B without it is left as it is."""
    try:
        from wandb.analytics.opentelemetry import opentelemetry_proxy

        opentelemetry_proxy.disable()
    except (ImportError, AttributeError):
        pass


def new_run_id() -> str:
    import secrets
    import string

    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))
