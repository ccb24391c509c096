"""``mptrain.rl.fit``: the Python entry of an RL run (the ``mptrain rl`` command calls it)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint import Checkpoint, resolve_resume, user_code_in
from ..errors import UserError
from ..launch.launchers import choose_launcher
from ..runner import RunRequest, run
from ..strategies.registry import ALGOS, strategy_class
from .config import RLConfig
from .envs import EnvSource, env_shape, require_gymnasium
from .nets import build_network
from .task import RLResult, RLTask


def fit(env: str | None = None, algo: str | None = None, *, out: str | Path | None = None,
        resume: str | Path | Checkpoint | None = None, quiet: bool = True,
        loggers=None, tb_dir: str | Path | None = None, callbacks=None,
        **settings) -> RLResult:
    """Train an agent on ``env`` (a Gymnasium id such as ``"CartPole-v1"`` or an import
    string ``"module:make_env"``) with ``algo`` (``"a3c"`` or ``"dqn"``) and return an
    :class:`~mptrain.rl.task.RLResult` (``model``, ``rounds``, ``summary``).

    ``settings`` are those of :class:`~mptrain.rl.config.RLConfig` (``workers``, ``steps``,
    ``seed``, ``eval_episodes``, ``eval_every``, ``target_return``, ``lr``, ...). ``resume``
    is the ``out`` folder of an earlier run with ``checkpoint_every``; what is not given
    then comes from its checkpoint, and the run continues in that folder. ``loggers``,
    ``tb_dir`` and ``callbacks`` are those of :func:`mptrain.fit`.
    """
    from ..api import telling_whom

    require_gymnasium()
    telling = telling_whom(loggers, tb_dir, callbacks)
    checkpoint, out = resolve_resume(resume, out)
    given = {k: v for k, v in {"env": env, "algo": algo, **settings}.items() if v is not None}
    if checkpoint is not None:
        if checkpoint.strategy not in ALGOS:
            raise UserError(f"the checkpoint was written by `mptrain run --strategy "
                            f"{checkpoint.strategy}`; resume it with mptrain run --resume")
        if given.get("algo", checkpoint.strategy) != checkpoint.strategy:
            raise UserError(f"the checkpoint was written by --algo {checkpoint.strategy}; "
                            f"resume with --algo {checkpoint.strategy}")
        strategy_class(checkpoint.strategy).check_checkpoint(checkpoint)
        user_code_in(checkpoint, {"env": given.get("env"), "net": given.get("net")})
        given = {**checkpoint.config, **given}
    given["quiet"] = quiet
    config = RLConfig.from_dict(given)
    algorithm = strategy_class(config.algo)
    launcher = choose_launcher(algorithm)
    shape = env_shape(config.env)
    torch.manual_seed(config.seed)
    model = build_network(config.algo, shape, config.network_width, config.net)
    task = RLTask(EnvSource(shape), run_info={"env": config.env, "net": config.net})
    return run(RunRequest(config=config, strategy=algorithm(config), launcher=launcher,
                          model=model, task=task, out=out, resume=checkpoint, quiet=quiet,
                          **telling))
