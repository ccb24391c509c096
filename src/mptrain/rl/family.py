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
    """What an RL run produced: the policy it hands back (``model``: the best evaluated one,
    or with ``keep="final"`` the last), both by name (``best_model``, ``final_model``: the
    same object when the final policy is the best), one metrics row per round
    (``rounds``), the summary."""

    final_model: nn.Module | None = None
    best_model: nn.Module | None = None

    @property
    def eval_return(self) -> float | None:
        """The final policy's mean greedy return (the last evaluation's)."""
        return self.summary.get("eval_return")

    @property
    def best_eval_return(self) -> float | None:
        """The best evaluation's mean greedy return: ``best_model``'s."""
        return self.summary.get("best_eval_return")

    @property
    def kept(self) -> str:
        """Which policy ``model`` is: ``"best"`` or ``"final"``."""
        return self.summary.get("kept", "final")


@dataclass
class RLFamily:
    data: EnvSource
    run_info: dict = field(default_factory=dict)
    #: The run's strategy, whose ``best_policy`` holds the best evaluated network (``best``).
    strategy: object = None
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
        report.write_outputs(out_dir, [m.as_dict() for m in rows], model,
                             self.best_network(model, summary), summary)

    def best_network(self, model: nn.Module, summary: dict) -> nn.Module:
        """The best evaluated policy (``model``, the final one, where that is it or where no
        evaluation kept one); read once the workers are gone."""
        policy = getattr(self.strategy, "best_policy", None)
        best_round = summary.get("best_at_round")
        if policy is None or best_round is None or best_round == summary.get("rounds_done"):
            return model   # the final evaluation kept it: the same tensors
        return policy.network(model)

    def hand_back(self, result: RLResult) -> RLResult:
        """``result`` with both policies named and ``model`` the one the run keeps."""
        result.final_model = result.model
        result.best_model = self.best_network(result.model, result.summary)
        if result.kept == "best":
            result.model = result.best_model
        return result

    def before_plotting(self) -> None:
        """RL's curves are drawn at the end; nothing to import ahead."""
