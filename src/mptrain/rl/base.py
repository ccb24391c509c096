"""The base classes of the RL algorithms -- what each is to the shared driver
(``engine.loop.train``): a strategy whose rounds are environment steps, a worker program
with a greedy policy, and an evaluation by greedy episodes that keeps the best policy and
stops the run at a target return."""

from __future__ import annotations

from abc import abstractmethod

import torch

from ..engine.evaluation import Evaluation, RoundEvaluation, ratio_over_ranks
from ..strategies.base import ResourceNeeds, Strategy, WorkerProgram, model_tensor_count
from .acting import evaluate_greedy
from .best import BestPolicy, BestSoFar
from .metrics import rl_round_extras, rl_round_parts


class ActorStrategy(Strategy):
    """An RL algorithm: its rounds are environment steps and its reports carry returns."""

    family = "rl"
    unit = "round"

    def needs(self, model, data, plan):
        # Actors act on the shared model (a3c) or a learner's (dqn): nothing to rehearse.
        # In shared memory: the model and the copy of the best evaluated policy (``best``).
        return ResourceNeeds(comm_numel=0, shared_tensors=model_tensor_count(model)
                             + BestPolicy.tensor_count(model),
                             private_replicas=False, rehearse=False,
                             extra_shared_bytes=BestPolicy.nbytes(model))

    @classmethod
    def check_checkpoint(cls, checkpoint) -> None:
        """Refuse, in one line, a checkpoint of this algorithm that it cannot resume."""

    @classmethod
    def check_resume(cls, config, checkpoint) -> None:
        """Refuse, in one line, resuming ``checkpoint`` with ``config`` (its settings over
        the checkpoint's) where the run could not continue as it was counted."""

    def __init__(self, config):
        super().__init__(config)
        #: The best evaluated policy, in shared memory from ``prepare`` on (``best``).
        self.best_policy: BestPolicy | None = None

    def prepare(self, model, data=None, plan=None) -> None:
        """Subclasses call this first: the copy the best policy is kept in."""
        self.best_policy = BestPolicy.create(model)

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
    the end, and every ``eval_every`` rounds), keep the policy of the best evaluation so far
    (``best``), and stop the run at ``target_return``.

    A policy whose evaluation would make it the best first plays ``confirm_episodes``
    more, and competes with the mean of all its episodes (its *score*; the best's is its
    own score): once a policy balances CartPole, most evaluations end at 500 on their two
    episodes, and the tie went to whichever came last, one that might fail every tenth
    episode (issue 55). The confirming episodes are the same at every evaluation
    (``eval_episodes`` on), as the evaluation's own are, so scores compare like with like.

    The episodes are reset with seeds of their own (``acting.EVAL_SEED``) in environments
    of their own, and greedy actions draw no random numbers, so evaluating changes nothing
    training does: a run's training curve is the same, bit for bit, with or without them
    (a test checks it).
    """

    # Actors write the shared network lock-free until their round ends.
    settles_first = True

    def __init__(self, setup):
        super().__init__(setup)
        self.best = BestSoFar(setup.group.rank, getattr(setup.strategy, "best_policy", None))

    def due(self, index: int, last: bool) -> bool:
        return last or evaluates_after(self.setup.config, index)

    def run(self, program) -> Evaluation:
        config, group = self.setup.config, self.setup.group
        returns = self._play(program, 0, config.eval_episodes)
        mean = ratio_over_ranks(group, sum(returns), len(returns), empty=float("-inf"))
        score, played = mean, config.eval_episodes
        if config.confirm_episodes and self.best.would_keep(mean):
            # Every rank decides the same (the same mean, the same best): the all-reduce
            # below is everyone's. The confirming episodes follow the evaluation's own.
            more = self._play(program, played, played + config.confirm_episodes)
            played += config.confirm_episodes
            score = ratio_over_ranks(group, sum(returns) + sum(more),
                                     len(returns) + len(more), empty=float("-inf"))
        kept = self.best.offer(score, program.eval_model())
        return Evaluation(extras={"eval_returns": returns, "eval_mean": mean,
                                  "new_best": kept, "eval_score": score,
                                  "eval_score_episodes": played})

    def _play(self, program, first: int, end: int) -> list[float]:
        """This rank's share of evaluation episodes ``first .. end - 1``."""
        group = self.setup.group
        return evaluate_greedy(program.greedy_actions, self.setup.config.env,
                               range(first + group.rank, end, group.world_size),
                               beat=self.setup.progress.beat)

    def reached_target(self, evaluation: Evaluation) -> bool:
        target = self.setup.config.target_return
        return target is not None and evaluation.extras["eval_mean"] >= target

    def state(self) -> dict:
        return self.best.state()

    def load_state(self, state: dict) -> None:
        self.best.load_state(state)


def evaluates_after(config, index: int) -> bool:
    """Whether round ``index`` (0-based) ends with a periodic evaluation (the last round
    always ends with one)."""
    every = config.eval_every or 0   # 0 (and a checkpoint's None of before): only the last
    return every > 0 and (index + 1) % every == 0
