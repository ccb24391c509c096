"""``mptrain.rl.fit``: the Python entry of an RL run (the ``mptrain rl`` command calls it)."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import Checkpoint, resolve_resume
from ..errors import UserError
from ..report.console import ConsolePresenter
from .config import ALGOS, RLConfig
from .envs import require_gymnasium
from .run import RLResult, run_rl


def fit(env: str | None = None, algo: str | None = None, *, out: str | Path | None = None,
        resume: str | Path | Checkpoint | None = None, quiet: bool = True,
        presenter: ConsolePresenter | None = None, **settings) -> RLResult:
    """Train an agent on ``env`` (a Gymnasium id such as ``"CartPole-v1"`` or an import
    string ``"module:make_env"``) with ``algo`` (``"a3c"`` or ``"dqn"``) and return an
    :class:`~mptrain.rl.run.RLResult` (``model``, ``rounds``, ``summary``).

    ``settings`` are those of :class:`~mptrain.rl.config.RLConfig` (``workers``, ``steps``,
    ``seed``, ``eval_episodes``, ``eval_every``, ``target_return``, ``lr``, ...). ``resume``
    is the ``out`` folder of an earlier run with ``checkpoint_every``; what is not given
    then comes from its checkpoint, and the run continues in that folder.
    """
    require_gymnasium()
    checkpoint, out = resolve_resume(resume, out)
    given = {k: v for k, v in {"env": env, "algo": algo, **settings}.items() if v is not None}
    if checkpoint is not None:
        if checkpoint.strategy not in ALGOS:
            raise UserError(f"the checkpoint was written by `mptrain run --strategy "
                            f"{checkpoint.strategy}`; resume it with mptrain run --resume")
        if given.get("algo", checkpoint.strategy) != checkpoint.strategy:
            raise UserError(f"the checkpoint was written by --algo {checkpoint.strategy}; "
                            f"resume with --algo {checkpoint.strategy}")
        given = {**checkpoint.config, **given}
    given["quiet"] = quiet
    config = RLConfig.from_dict(given)
    return run_rl(config, presenter=presenter, out=out, resume=checkpoint)
