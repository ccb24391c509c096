"""The parent's side of a run while it trains: every rank's round report in, and out of it
the round's metrics, the console line, metrics.jsonl, the progress bar for the next round,
and checkpoints (through the keeper)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ..errors import TrainingDiverged
from ..errors import setting_name as named   # as the caller spelled the setting
from .metrics import RoundCollector, RoundMetrics
from .outputs import write_jsonl


class RunRecorder:
    def __init__(self, config, strategy, task: str, presenter, keeper, out_dir: Path | None,
                 workers: int, samples_per_round: int, run_started: float,
                 history: list[RoundMetrics], model=None, callbacks=None,
                 divergence_advice: str | None = None):
        self.config, self.presenter, self.keeper, self.out_dir = config, presenter, keeper, \
            out_dir
        self.model = model   # the parent's: what a checkpoint of the round would hold
        self.strategy, self.samples_per_round = strategy, samples_per_round
        self.callbacks = callbacks  # callbacks.CallbackList: trackers and the user's
        self.history = history   # shared with the FitResult
        # What a divergence is owed to when not to the learning rate (NaN in the data).
        self.divergence_advice = divergence_advice
        self.collector = RoundCollector(workers, task, run_started=run_started,
                                        extras=strategy.round_extras)

    def start(self, done: int) -> None:
        """A (re)start of the workers at round ``done``: forget what is past it."""
        del self.history[done:]
        self.collector.reset()
        if done < self.config.units:
            self.presenter.start_round(done + 1, self.config.units, self.samples_per_round,
                                       self.config.unit)

    def on_report(self, report) -> None:
        metrics, reports = self.collector.add(report)
        if metrics is None:
            return
        self.history.append(metrics)
        self.presenter.end_round(metrics, self.config.units, self.config.unit,
                                 self.strategy.round_line(metrics))
        for note in self.strategy.round_notes(metrics):
            self.presenter.note(note)
        diverged = self.divergence(metrics, reports)
        # metrics.jsonl, then the checkpoint, then the trackers: a stop at any point leaves
        # every round a checkpoint holds in metrics.jsonl (a stop right after a checkpoint
        # appeared once found no metrics.jsonl), and a slow tracker never costs the
        # round's checkpoint.
        if self.out_dir is not None:
            write_jsonl(self.out_dir / "metrics.jsonl", [m.as_dict() for m in self.history])
        saved = self.keeper.offer(metrics.epoch, reports, self.history) \
            if diverged is None else None
        if self.callbacks:
            self.callbacks.on_round_end(metrics.as_dict())
            if saved is not None:
                self.callbacks.on_checkpoint(saved, metrics.epoch)
        if diverged is not None:
            raise TrainingDiverged(diverged)
        if metrics.epoch < self.config.units and not self.reached_target(metrics) \
                and not metrics.extras.get("stopped"):   # a strategy's own stop (fedavg's ε)
            self.presenter.start_round(metrics.epoch + 1, self.config.units,
                                       self.samples_per_round, self.config.unit)

    def divergence(self, metrics: RoundMetrics, reports) -> str | None:
        """What went non-finite in this round, in one line with what to do, or None.

        Checked before the round's checkpoint is offered: a diverged model never replaces a
        good checkpoint. The loss is the round's mean over every rank's steps, so a single
        non-finite step shows in it; parameters are checked too, since the round's last step
        can break them after its loss was computed.
        """
        unit = self.config.unit
        if metrics.train_loss is not None and not math.isfinite(metrics.train_loss):
            steps = sorted((r.extras["first_nonfinite_step"], r.rank) for r in reports
                           if r.extras.get("first_nonfinite_step") is not None)
            at = f" (first at step {steps[0][0] + 1} on rank {steps[0][1]})" if steps else ""
            what = f"the training loss was {metrics.train_loss} in {unit} {metrics.epoch}{at}"
        elif self.model is not None and not parameters_finite(self.model):
            what = f"the model's parameters became non-finite in {unit} {metrics.epoch}"
        elif metrics.extras.get("diverged"):   # a strategy's own finding (fedavg's clients)
            what = metrics.extras["diverged"]
        else:
            return None
        if self.keeper.saved_path is not None:
            kept = (f"the last good checkpoint ({unit} {self.keeper.saved_epoch}) is kept in "
                    f"{self.keeper.saved_path}")
        else:
            kept = "no checkpoint was written"
        advice = self.divergence_advice or f"try a lower {named('lr')}"
        return f"training diverged: {what}; stopped, {kept}; {advice}"

    def reached_target(self, metrics: RoundMetrics) -> bool:
        target = self.config.target_accuracy
        return target is not None and metrics.test_accuracy is not None \
            and metrics.test_accuracy >= target

    @property
    def first_step_at(self) -> float | None:
        return self.collector.first_step_at


@torch.no_grad()
def parameters_finite(model) -> bool:
    """Whether every floating-point parameter and buffer of ``model`` is finite."""
    return all(bool(torch.isfinite(t).all()) for t in model.state_dict().values()
               if t.is_floating_point())
