"""One RL run, start to end, in the order things happen -- the RL counterpart of
``mptrain.runner``, over the same pieces: the supervised workers (``launch.execute``), the
restart and signal policy, the recorder and checkpoint keeper, the console and the atomic
output files. Only the environments, the network and the per-actor driver are RL's own."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from ..checkpoint import Checkpoint, CheckpointKeeper, check_resumable
from ..launch.execute import Job
from ..launch.layout import choose_sharing, plan_layout
from ..launch.restarts import train_with_restarts
from ..report.console import ConsolePresenter
from ..report.metrics import EpochMetrics
from ..report.outputs import prepare_out_dir
from ..report.recorder import RunRecorder
from .a3c import A3CStrategy
from .config import RLConfig
from .dqn import DQNStrategy
from .driver import train_rl
from .envs import EnvSource, env_shape
from .nets import build_network
from .replay import SharedReplay
from . import report


@dataclass
class RLResult:
    """What an RL run produced: the trained network, one metrics row per round, the summary."""

    model: nn.Module
    config: RLConfig
    rounds: list = field(default_factory=list)    # report.metrics.EpochMetrics
    summary: dict = field(default_factory=dict)
    restarts: int = 0

    @property
    def eval_return(self) -> float | None:
        return self.summary.get("eval_return")


def run_rl(config: RLConfig, presenter: ConsolePresenter | None = None,
           out: str | Path | None = None, resume: Checkpoint | None = None) -> RLResult:
    started = time.monotonic()
    presenter = presenter or ConsolePresenter(quiet=config.quiet)
    shape = env_shape(config.env)
    torch.manual_seed(config.seed)
    model = build_network(config.algo, shape, config.hidden, config.net)
    strategy = make_rl_strategy(config)
    layout = plan_layout(config, strategy)
    check_resumable(resume, config, layout.workers)
    source = EnvSource(shape)
    replay_bytes = SharedReplay.estimate_nbytes(config.buffer_size, shape.obs_dim,
                                                config.workers) if config.algo == "dqn" else 0
    choose_sharing(config, layout, source, model, strategy, extra_bytes=replay_bytes)
    out_dir = prepare_out_dir(out) if out is not None else None  # after every refusal
    keeper = CheckpointKeeper(config, {"env": config.env, "net": config.net}, out_dir, resume)
    if resume is not None:
        model.load_state_dict(resume.model)
    presenter.banner(report.banner_lines(config, shape, model, layout)
                     + strategy.describe(layout))

    result = RLResult(model=model, config=config)
    if resume is not None:
        result.rounds = [EpochMetrics.from_dict(row) for row in resume.metrics]
    recorder = RunRecorder(config, strategy, "rl", presenter, keeper, out_dir, layout.workers,
                           strategy.samples_per_round(source, layout.workers), started,
                           result.rounds)
    result.restarts = train_with_restarts(
        Job(config=config, bundle=source, model=model,
            strategy=strategy, layout=layout, presenter=presenter,
            on_report=recorder.on_report, checkpoint_every=keeper.every, driver=train_rl),
        keeper, recorder, who="actors", command="mptrain rl")

    rows = [m.as_dict() for m in result.rounds]
    result.summary = report.build_summary(config, layout, rows, time.monotonic() - started,
                                          result.restarts)
    if out_dir is not None:
        report.write_outputs(out_dir, rows, model, result.summary)
    presenter.result(report.result_lines(result.summary, out_dir))
    return result


def make_rl_strategy(config: RLConfig):
    return {"a3c": A3CStrategy, "dqn": DQNStrategy}[config.algo](config)
