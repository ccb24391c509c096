"""``mptrain.rl.fit``: the Python entry of an RL run (the ``mptrain rl`` command calls it)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint import Checkpoint, check_network_fits, resolve_resume, user_code_in
from ..errors import UserError, as_keyword, python_caller, spelled
from ..launch.launchers import choose_launcher
from ..runner import RunRequest, run
from ..strategies.registry import ALGOS, strategy_class
from .best import check_best_state
from .config import RLConfig
from .envs import EnvSource, env_shape, require_gymnasium
from .nets import run_network
from .family import RLResult, RLFamily


def rl_family(checkpoint=None):
    """The RL family as the settings resolver (``mptrain.settings``) sees it; a resumed
    run's rounds go on from the steps ``checkpoint``'s rounds held."""
    from ..settings import Family
    from .config import applicable_rl_settings, check_rl_setting, resumed_at, rl_setting_names

    start = resumed_at(checkpoint)

    def more_work(config, done):
        return "steps", config.round_end(done - 1) + 1 if done else 1

    return Family(strategy_key="algo", known=rl_setting_names,
                  check=check_rl_setting, resumable=applicable_rl_settings,
                  build=lambda said, _defaults: RLConfig.from_dict(said, resumed_at=start),
                  more_work=more_work)


def rl_config(layers, *, checkpoint=None, resume_from: str | None = None) -> RLConfig:
    """An RL run's config from settings ``layers`` over ``checkpoint``."""
    from ..settings import resolve

    return resolve(rl_family(checkpoint), layers, checkpoint=checkpoint,
                   resume_from=resume_from)


def fit(env: str | None = None, algo: str | None = None, *, out: str | Path | None = None,
        resume: str | Path | Checkpoint | None = None, overwrite: bool = False,
        quiet: bool = True,
        loggers=None, tb_dir: str | Path | None = None, callbacks=None,
        **settings) -> RLResult:
    """Train an agent on ``env`` (a Gymnasium id such as ``"CartPole-v1"`` or an import
    string ``"module:make_env"``) with ``algo`` (``"a3c"``, ``"dqn"`` or ``"ppo"``) and return an
    :class:`~mptrain.rl.family.RLResult` (``model``, ``rounds``, ``summary``).

    ``model`` is the policy of the best greedy evaluation (every ``eval_every`` rounds and
    at the end), as ``model.pt`` is; ``keep="final"`` makes it the network of the last
    step. Both are there by name: ``best_model`` and ``final_model``.

    ``settings`` are those of :class:`~mptrain.rl.config.RLConfig` (``workers``, ``steps``,
    ``seed``, ``eval_episodes``, ``eval_every``, ``target_return``, ``keep``, ``lr``,
    ...); an unknown one is refused. ``resume`` is the ``out`` folder of an earlier run with
    ``checkpoint_every``; what is not given then comes from its checkpoint, and the run
    continues in that folder. ``loggers``, ``tb_dir``, ``callbacks`` and ``overwrite`` are
    those of :func:`mptrain.fit`.
    """
    from ..settings import keywords

    with spelled(as_keyword):   # the run names settings as this call does
        said = {"env": env, "algo": algo, **settings, "quiet": quiet, "overwrite": overwrite}
        return train([keywords(said,
                               "rl.fit()")],
                     out=out, resume=resume, loggers=loggers, tb_dir=tb_dir,
                     callbacks=callbacks)


def train(layers, *, out=None, resume=None, loggers=None, tb_dir=None,
          callbacks=None) -> RLResult:
    """One RL run from settings ``layers`` (``mptrain.settings``: a config file and flags,
    or ``fit()``'s keywords) over the checkpoint at ``resume``: the way in of both
    ``mptrain rl`` and :func:`fit`."""
    from ..api import telling_whom

    checkpoint, out = resolve_resume(resume, out)
    config = resolved_config(layers, checkpoint, resume)   # a typo first, gymnasium or not
    if checkpoint is not None:
        strategy_class(config.algo).check_resume(config, checkpoint)
    require_gymnasium()
    telling = telling_whom(loggers, tb_dir, callbacks)
    algorithm = strategy_class(config.algo)
    launcher = choose_launcher(algorithm)
    shape = env_shape(config.env)
    torch.manual_seed(config.seed)
    model = run_network(config, shape)
    if checkpoint is not None:   # before a worker loads it
        check_network_fits(checkpoint, model)   # first: another network is no damage
        check_best_state(checkpoint, model)
    strategy = algorithm(config)
    family = RLFamily(EnvSource(shape), run_info={"env": config.env, "net": config.net},
                      strategy=strategy)
    return family.hand_back(run(RunRequest(config=config, strategy=strategy,
                                           launcher=launcher, model=model, family=family,
                                           out=out, resume=checkpoint, quiet=config.quiet,
                                           **telling)))


def resolved_config(layers, checkpoint: Checkpoint | None, resume) -> RLConfig:
    """The RL run's config from ``layers`` over ``checkpoint``, whose own code (``env``,
    ``net``) the user must name again."""
    if checkpoint is not None:
        if checkpoint.strategy not in ALGOS:
            how = "mptrain.fit(model, data, resume=...)" if python_caller() \
                else "mptrain run --resume"
            raise UserError(f"the checkpoint was written by a supervised run (strategy "
                            f"{checkpoint.strategy}), not an RL one; resume it with {how}")
        strategy_class(checkpoint.strategy).check_checkpoint(checkpoint)
        said = {}
        for layer in layers:
            said.update({k: v for k, v in layer.values.items() if v is not None})
        user_code_in(checkpoint, {"env": said.get("env"), "net": said.get("net")})
    return rl_config(layers, checkpoint=checkpoint,
                     resume_from=str(resume) if isinstance(resume, (str, Path)) else None)
