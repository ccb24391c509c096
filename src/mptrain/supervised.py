"""A supervised run as the runner sees it (``runner.RunFamily``): a data set in shared
memory, its test set to score a round, and the banner, summary and files of
``report.summary``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .data.sources import DataBundle
from .engine.evaluation import TestSetEvaluation
from .launch import warmup
from .launch.plan import preflight
from .report import plots, summary
from .result import FitResult


@dataclass
class SupervisedFamily:
    data: DataBundle
    model_name: str
    #: How ``mptrain run --resume`` rebuilds the data and model (``data``, ``data_dir``,
    #: ``model``), recorded in checkpoints.
    run_info: dict = field(default_factory=dict)
    #: The data's fingerprint (``data.fingerprint``) where a checkpoint records it or a
    #: resume checks it; None where neither happens (it costs a pass over the data).
    data_fingerprint: dict | None = None
    who: str = "workers"
    command: str = "mptrain run"
    evaluation = TestSetEvaluation

    @property
    def kind(self) -> str:
        return self.data.task

    def preflight(self, config, model, strategy, plan) -> list[str]:
        return preflight(config, self.data, model, strategy, plan)

    def result(self, model, config) -> FitResult:
        return FitResult(model=model, config=config)

    def banner(self, config, model, plan) -> list[str]:
        return summary.banner_lines(config, self.data, model, self.model_name, plan)

    def summary(self, config, model, plan, rows, wall_s, startup_s) -> dict:
        return summary.build_summary(config, self.data, model, self.model_name, plan, rows,
                                     wall_s, startup_s)

    def result_lines(self, record: dict, out_dir: Path | None) -> list[str]:
        return summary.result_lines(record, out_dir)

    def write_outputs(self, out_dir: Path, model, rows, record: dict) -> None:
        summary.write_outputs(out_dir, model, rows, record)

    def before_plotting(self) -> None:
        warmup.import_in_background(plots.MODULES)
