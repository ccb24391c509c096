"""An environment for the tests: CartPole whose actor of rank 1 raises after 300 steps
(the driver seeds torch with seed + rank, so rank 1 of a seed-0 run has initial seed 1)."""

import gymnasium
import torch


class ExplodesInRankOne(gymnasium.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps > 300 and torch.initial_seed() == 1:
            raise RuntimeError("the environment exploded in rank 1")
        return self.env.step(action)


def make():
    return ExplodesInRankOne(gymnasium.make("CartPole-v1"))
