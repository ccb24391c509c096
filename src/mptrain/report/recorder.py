"""The parent's side of a run while it trains: every rank's round report in, and out of it
the round's metrics, the console line, metrics.jsonl, the progress bar for the next round,
and checkpoints (through the keeper)."""

from __future__ import annotations

from pathlib import Path

from .metrics import EpochCollector, EpochMetrics
from .outputs import write_jsonl


class RunRecorder:
    def __init__(self, config, strategy, task: str, presenter, keeper, out_dir: Path | None,
                 workers: int, samples_per_round: int, run_started: float,
                 history: list[EpochMetrics]):
        self.config, self.presenter, self.keeper, self.out_dir = config, presenter, keeper, \
            out_dir
        self.samples_per_round = samples_per_round
        self.history = history   # shared with the FitResult
        self.collector = EpochCollector(workers, task, run_started=run_started,
                                        extras=strategy.round_extras)

    def start(self, done: int) -> None:
        """A (re)start of the workers at round ``done``: forget what is past it."""
        del self.history[done:]
        self.collector.reset()
        if done < self.config.units:
            self.presenter.start_epoch(done + 1, self.config.units, self.samples_per_round,
                                       self.config.unit)

    def on_report(self, report) -> None:
        metrics, reports = self.collector.add(report)
        if metrics is None:
            return
        self.history.append(metrics)
        self.presenter.end_epoch(metrics, self.config.units, self.config.unit)
        self._notes(metrics)
        self.keeper.offer(metrics.epoch, reports, self.history)
        if self.out_dir is not None:
            write_jsonl(self.out_dir / "metrics.jsonl", [m.as_dict() for m in self.history])
        if metrics.epoch < self.config.units and not self.reached_target(metrics) \
                and not metrics.extras.get("stopped"):
            self.presenter.start_epoch(metrics.epoch + 1, self.config.units,
                                       self.samples_per_round, self.config.unit)

    def _notes(self, metrics: EpochMetrics) -> None:
        """What a fedavg round's clients did that the reader should know."""
        extras, index = metrics.extras, metrics.epoch
        nonfinite = extras.get("nonfinite_clients") or []
        failed = [c for c in extras.get("failed_clients") or [] if c not in nonfinite]
        if failed:
            self.presenter.note(f"round {index}: dropped failing client(s) "
                                f"{', '.join(map(str, failed))} (--accept-failures)")
        if nonfinite:
            self.presenter.note(f"round {index}: dropped client(s) "
                                f"{', '.join(map(str, nonfinite))}: non-finite update")
        if extras.get("clients") == 0:
            self.presenter.note(f"round {index}: Poisson sampling drew no client; the round "
                                "changed nothing" + (" but the noise" if "epsilon" in extras
                                                     else ""))
        elif extras.get("clients") and extras.get("reported") == 0:
            self.presenter.note(f"round {index}: no sampled client reported; the round "
                                "changed nothing" + (" but the noise" if "epsilon" in extras
                                                     else ""))
        if extras.get("stopped"):
            self.presenter.note(f"round {index}: stopped: the next round would spend more "
                                f"than --target-epsilon {self.config.target_epsilon:g} "
                                f"(epsilon now {extras.get('epsilon'):.3g})")

    def reached_target(self, metrics: EpochMetrics) -> bool:
        target = self.config.target_accuracy
        return target is not None and metrics.test_accuracy is not None \
            and metrics.test_accuracy >= target

    @property
    def first_step_at(self) -> float | None:
        return self.collector.first_step_at
