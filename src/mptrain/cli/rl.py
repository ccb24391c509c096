"""``mptrain rl``: reinforcement learning with parallel actors (flags in, ``mptrain.rl.fit``)."""

from __future__ import annotations

import click

from ..config import START_METHODS
from ..strategies.registry import ALGOS
from .app import Choice, cli, joined_loggers, supervised_run_options


@cli.command()
@click.option("--env", help="Gymnasium id (CartPole-v1, the default) or module:make_env.")
@click.option("--algo", type=Choice(ALGOS),
              help="a3c: actor-learners, lock-free shared model (default); dqn: actors feed "
                   "a shared replay buffer, one learner; ppo: actors on vectorized "
                   "environments, synchronous rollouts, one learner.")
@click.option("--workers", type=int, help="Actor processes (2).")
@click.option("--steps", type=int, help="Environment steps in total, over all actors (200,000).")
@click.option("--round-steps", type=int,
              help="Environment steps per round: one metrics row, progress bar, checkpoint "
                   "(10,000).")
@click.option("--seed", type=int,
              help="Seed; actor i uses seed and i (0). dqn and ppo: the same seed gives "
                   "the same run bit for bit.")
@click.option("--lr", type=float, help="Adam learning rate (a3c 1e-3, dqn 2.3e-3, ppo 2e-3).")
@click.option("--gamma", type=float, help="Discount (0.99).")
@click.option("--hidden", type=int,
              help="Width of the built-in networks' two layers (a3c 128, dqn 256, ppo 64).")
@click.option("--net", help="Your network, module:make(obs_dim, n_actions).")
@click.option("--eval-episodes", type=int,
              help="Greedy episodes of each evaluation: every --eval-every rounds and at "
                   "the end (2).")
@click.option("--eval-every", type=int,
              help="Evaluate greedily every N rounds, and keep the best policy (2: at most "
                   "5% of a CartPole run's steps); 0: only at the end.")
@click.option("--confirm-episodes", type=int,
              help="Episodes more that a policy plays before it is kept as the best, on the "
                   "mean of all its episodes (dqn 20, a3c and ppo 0: kept on the "
                   "evaluation alone).")
@click.option("--keep", type=click.Choice(("best", "final")),
              help="The policy written as model.pt: the best evaluated (default) or the "
                   "final one; both are also best.pt and final.pt.")
@click.option("--target-return", type=float,
              help="Stop at the first evaluation whose mean greedy return reaches this.")
@click.option("--n-steps", type=int,
              help="a3c, ppo: rollout length per update, per environment (a3c 20, ppo 32).")
@click.option("--gae-lambda", type=float,
              help="a3c, ppo: GAE lambda (a3c 1: n-step advantages; ppo 0.95).")
@click.option("--entropy-coef", type=float, help="a3c, ppo: entropy bonus (a3c 0.01, ppo 0).")
@click.option("--value-coef", type=float, help="a3c, ppo: weight of the value loss (0.5).")
@click.option("--max-grad-norm", type=float,
              help="a3c, ppo: clip gradients to this L2 norm (a3c 40, ppo 0.5).")
@click.option("--envs-per-actor", type=int,
              help="ppo: environments in each actor's gymnasium.vector env (8).")
@click.option("--update-epochs", type=int,
              help="ppo: passes over each rollout batch per update (10).")
@click.option("--clip-coef", type=float,
              help="ppo: the surrogate's clip range, ratios within 1 +- this (0.2).")
@click.option("--clip-value/--no-clip-value", default=None,
              help="ppo: clip the value loss by --clip-coef too (off).")
@click.option("--normalize-advantages/--no-normalize-advantages", default=None,
              help="ppo: normalize advantages per minibatch (on).")
@click.option("--anneal-lr/--no-anneal-lr", default=None,
              help="dqn, ppo: learning rate falls linearly to 0 over --steps (on).")
@click.option("--target-kl", type=float,
              help="ppo: stop an update's epochs once the approximate KL exceeds this.")
@click.option("--buffer-size", type=int, help="dqn: replay transitions in total (100,000).")
@click.option("--batch-size", type=int,
              help="dqn: transitions per update (64); ppo: per minibatch (256).")
@click.option("--learning-starts", type=int, help="dqn: steps before the first update (1,000).")
@click.option("--train-every", type=int, help="dqn: environment steps per update (2).")
@click.option("--target-every", type=int,
              help="dqn: updates between target-network updates (512).")
@click.option("--target-tau", type=float,
              help="dqn: each target update moves the target this fraction of the way to "
                   "the online network (1: a copy; stable-baselines3's tau).")
@click.option("--return-steps", type=int,
              help="dqn: rewards summed before the target bootstraps: n-step returns (3).")
@click.option("--advantage-learning", type=float,
              help="dqn: advantage learning's alpha in [0, 1): a non-greedy action's target "
                   "is lowered by alpha times its gap to the greedy one (0).")
@click.option("--dueling/--no-dueling", default=None,
              help="dqn: a dueling head on the built-in network, Q = V + A - mean(A) "
                   "(off; not with --net).")
@click.option("--policy-every", type=int,
              help="dqn: environment steps between renewals of the network the actors act "
                   "with (256).")
@click.option("--eps-start", type=float, help="dqn: epsilon at the start (1).")
@click.option("--eps-end", type=float, help="dqn: epsilon at the end of --eps-steps (0.04).")
@click.option("--eps-steps", type=int,
              help="dqn: steps over which epsilon falls from --eps-start to --eps-end "
                   "(8,000).")
@click.option("--start-method", type=Choice(START_METHODS),
              help="Override the automatic choice of how actors start (fork on Linux).")
@click.option("--threads-per-worker", type=int, help="torch threads per actor (1).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML file with any of these options; flags override it.")
@supervised_run_options("actor", "rounds")
def rl(config_file, out, resume, quiet, logger, tb_dir, **flags):
    """Reinforcement learning with parallel actor processes on a Gymnasium environment.

    a3c runs --workers actor-learners, each stepping its own environment and applying
    n-step actor-critic gradients lock-free to one shared network (shared Adam state).
    dqn runs one learner (double DQN, target network, epsilon schedule) and actors that feed
    a replay buffer in shared memory (--workers 1: one process does both). ppo runs
    --workers actors, each stepping --envs-per-actor environments, with rank 0 also the
    learner (clipped surrogate, GAE, minibatch epochs). A seed names a dqn or ppo run: the
    same settings give the same curve bit for bit. Every --eval-every rounds and at the
    end the greedy policy plays --eval-episodes episodes (seeds of their own: training is
    the same without them); the best evaluated policy is model.pt (--keep final: the last
    one). Needs gymnasium: pip install 'mptrain[rl]'.
    """
    from ..config import load_config_file
    from ..launch import openmp
    from ..rl.api import train
    from ..rl.config import rl_setting_names
    from ..settings import config_file as file_layer
    from ..settings import flags as flag_layer

    file = load_config_file(config_file, rl_setting_names() | _NOT_SETTINGS,
                            tables=("rl", "run")) if config_file else {}
    where = {k: v for k, v in file.items() if k in _NOT_SETTINGS}
    layers = [file_layer(file, leave_out=_NOT_SETTINGS) if file else None,
              flag_layer({**flags, "quiet": quiet})]
    out = out if out is not None else where.get("out")
    logger = joined_loggers(logger) or where.get("logger")
    tb_dir = tb_dir if tb_dir is not None else where.get("tb_dir")
    openmp.keep_this_process_on_one_thread()   # so actors with several threads can fork
    train([layer for layer in layers if layer is not None], out=out, resume=resume,
          loggers=logger, tb_dir=tb_dir)


#: Config-file keys of `mptrain rl` that are not settings: where outputs go, who is told.
_NOT_SETTINGS = frozenset({"out", "logger", "tb_dir"})
