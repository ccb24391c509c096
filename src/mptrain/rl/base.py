"""The base classes of the RL algorithms -- what each is to the shared driver
(``engine.loop.train``): a strategy whose rounds are environment steps, a worker program
with a greedy policy, and an evaluation by greedy episodes that stops the run at a target
return."""

from __future__ import annotations

from abc import abstractmethod

import torch

from ..engine.evaluation import Evaluation, RoundEvaluation, ratio_over_ranks
from ..strategies.base import ResourceNeeds, Strategy, WorkerProgram, model_tensor_count
from .acting import evaluate_greedy
from .metrics import rl_round_extras, rl_round_parts


class ActorStrategy(Strategy):
    """An RL algorithm: its rounds are environment steps and its reports carry returns."""

    family = "rl"
    unit = "round"

    def needs(self, model, data, plan):
        # Actors act on the shared model (a3c) or a learner's (dqn): nothing to rehearse.
        return ResourceNeeds(comm_numel=0, shared_tensors=model_tensor_count(model),
                             private_replicas=False, rehearse=False)

    @classmethod
    def check_checkpoint(cls, checkpoint) -> None:
        """Refuse, in one line, a checkpoint of this algorithm that it cannot resume."""

    @classmethod
    def check_resume(cls, config, checkpoint) -> None:
        """Refuse, in one line, resuming ``checkpoint`` with ``config`` (its settings over
        the checkpoint's) where the run could not continue as it was counted."""

    def samples_per_round(self, data, workers: int) -> int:
        return self.config.round_steps

    def round_extras(self, reports) -> dict:
        return rl_round_extras(reports)

    def round_line(self, metrics) -> list[str]:
        return rl_round_parts(metrics)


class ActorProgram(WorkerProgram):
    """An RL worker program: a round of acting and learning, and a greedy policy."""

    @abstractmethod
    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """The actions the trained policy takes for a batch of observations, one per row
        (evaluations play their episodes side by side: ``acting.evaluate_greedy``)."""


class GreedyEvaluation(RoundEvaluation):
    """RL runs: the ranks share ``eval_episodes`` greedy episodes of the trained policy (at
    the end, and every ``eval_every`` rounds); the run stops at ``target_return``."""

    # Actors write the shared network lock-free until their round ends.
    settles_first = True

    def due(self, index: int, last: bool) -> bool:
        every = self.setup.config.eval_every
        return last or (every is not None and (index + 1) % every == 0)

    def run(self, program) -> Evaluation:
        config, group = self.setup.config, self.setup.group
        mine = range(group.rank, config.eval_episodes, group.world_size)
        returns = evaluate_greedy(program.greedy_actions, config.env, mine,
                                  beat=self.setup.progress.beat)
        return Evaluation(extras={"eval_returns": returns})

    def reached_target(self, evaluation: Evaluation) -> bool:
        target = self.setup.config.target_return
        if target is None:
            return False
        returns = evaluation.extras["eval_returns"]
        return ratio_over_ranks(self.setup.group, sum(returns), len(returns),
                                empty=float("-inf")) >= target
