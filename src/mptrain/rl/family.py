"""An RL run as the runner sees it (``runner.RunFamily``): actors on environments instead of
a data set, greedy episodes to score a round, and RL's banner, summary and files
(``rl.report``). Everything
else -- plan, launcher, supervision, restarts, recorder, checkpoints, console -- is the one
the supervised runs use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch.nn as nn

from ..launch.plan import check_shared_memory
from ..result import FitResult
from . import report
from .base import GreedyEvaluation
from .envs import EnvSource


@dataclass
class RLResult(FitResult):
    """What an RL run produced: the trained network, one metrics row per round (``rounds``),
    the summary."""

    @property
    def eval_return(self) -> float | None:
        return self.summary.get("eval_return")


@dataclass
class RLFamily:
    data: EnvSource
    run_info: dict = field(default_factory=dict)
    kind: str = "rl"
    who: str = "actors"
    command: str = "mptrain rl"
    evaluation = GreedyEvaluation

    def data_fingerprint(self, config, resume, launcher, keeps: bool) -> None:
        """An environment is no data set to fingerprint: a resume checks its settings."""
        return None

    def preflight(self, config, model, strategy, plan) -> list[str]:
        check_shared_memory(self.data, model, strategy, plan)
        return []

    def divergence_advice(self) -> str | None:
        return None   # an environment's observations are the agent's to cope with

    def result(self, model: nn.Module, config) -> RLResult:
        return RLResult(model=model, config=config)

    def banner(self, config, model, plan) -> list[str]:
        return report.banner_lines(config, self.data.shape, model, plan)

    def summary(self, config, model, plan, rows, wall_s, startup_s) -> dict:
        return report.build_summary(config, plan, [m.as_dict() for m in rows], wall_s)

    def result_lines(self, summary: dict, out_dir: Path | None) -> list[str]:
        return report.result_lines(summary, out_dir)

    def write_outputs(self, out_dir: Path, model, rows, summary: dict) -> None:
        report.write_outputs(out_dir, [m.as_dict() for m in rows], model, summary)

    def before_plotting(self) -> None:
        """RL's curves are drawn at the end; nothing to import ahead."""
