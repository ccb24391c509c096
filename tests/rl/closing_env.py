"""Environments for the tests that log, to the file named by ``MPTRAIN_TEST_ENV_LOG``, each
one made and closed, with the process's torch seed (the driver seeds torch with seed +
rank, so the actor of rank r of a seed-0 run logs r; other processes log other seeds)."""

import os

import gymnasium
import torch


class Logged(gymnasium.Wrapper):
    def __init__(self, env, explodes_in_rank_one: bool = False):
        super().__init__(env)
        self.explodes = explodes_in_rank_one
        self.steps = 0
        self._log("made")

    def _log(self, event: str) -> None:
        with open(os.environ["MPTRAIN_TEST_ENV_LOG"], "a") as log:
            log.write(f"{event} {os.getpid()}-{id(self)} {torch.initial_seed()}\n")

    def step(self, action):
        self.steps += 1
        if self.explodes and self.steps > 300 and torch.initial_seed() == 1:
            raise RuntimeError("the environment exploded in rank 1")
        return self.env.step(action)

    def close(self):
        self._log("closed")
        super().close()


def make():
    return Logged(gymnasium.make("CartPole-v1"))


def make_exploding():
    return Logged(gymnasium.make("CartPole-v1"), explodes_in_rank_one=True)
