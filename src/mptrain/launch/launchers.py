"""Where a run's ranks come from, decided once when the run is planned: the calling process
(``single``), mptrain's own supervised worker processes, or processes torchrun started
(this process one of them). Everything that differs between the three -- the plan, settings
the launcher owns, which rank speaks and writes, how a job is joined and resumed, one
attempt at training, how a stop is described -- is a method here, so no other module asks
"is this torchrun?" (Lightning's ``creates_processes_externally``, asked once).
"""

from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from ..errors import setting_name as named   # as the caller spelled the setting
from . import attempt
from .plan import RunPlan, plan_in_process, plan_under_launcher, plan_workers
from .world import ExternalWorld, detect_external_world, stray_rank_variables


@dataclass
class Joined:
    """What joining the run's ranks found: a checkpoint to resume from, notes for the user,
    entries for the checkpoint's run record, and whether the launcher may restart the job."""

    resume: object | None = None
    notes: list[str] = field(default_factory=list)
    run_info: dict = field(default_factory=dict)
    restartable: bool = False


class Launcher(ABC):
    #: Whether mptrain starts the worker processes itself.
    starts_processes: bool = False

    def __init__(self, notes: tuple[str, ...] = ()):
        #: What the user should know about how the launcher was chosen (shown once joined).
        self.notes = tuple(notes)

    @abstractmethod
    def plan(self, config, strategy, model, data) -> RunPlan:
        """The run's shape (see ``launch.plan``)."""

    def refuse_settings(self, given: dict) -> None:
        """Refuse settings this launcher would ignore (a ``UserError``)."""

    def presenter_role(self) -> dict:
        """How this process's console speaks (``ConsolePresenter`` keywords)."""
        return {}

    @property
    def writes_outputs(self) -> bool:
        """Whether this process writes --out (one process of a run does)."""
        return True

    def join(self, config, plan: RunPlan, out, resume) -> Joined:
        """Meet the run's other ranks, if any, and find what to resume from."""
        return Joined(resume=resume, notes=list(self.notes))

    def place_data(self, bundle) -> None:
        """Build ``bundle`` where this launcher's ranks will read it, ahead of the first
        attempt (which then finds it built): a resume's check of its data reads the bytes
        once, where they will stay, instead of computing rows twice (``data.fingerprint``).
        None here: a torchrun job places its data in memory its node's ranks share once
        they have met."""

    @abstractmethod
    def train(self, job) -> None:
        """One attempt at the whole run."""

    def describe_stop(self, signum: int) -> str | None:
        """What a stop by ``signum`` says, when the launcher has its own words for it."""
        return None

    def finish(self) -> None:
        """After the run, successful."""


class InProcessLauncher(Launcher):
    """``single``: the run trains in the calling process."""

    #: How worker processes start and share tensors: nothing to say where none is started.
    WORKER_SETTINGS = ("start_method", "sharing_strategy")

    def refuse_settings(self, given):
        from ..config import DEFAULT_STRATEGY, SETTING_DEFAULTS

        for name in self.WORKER_SETTINGS:
            if given.get(name) is not None and given[name] != SETTING_DEFAULTS[name]:
                raise UserError(f"{named(name)} does nothing with {named('strategy')} "
                                f"{given.get('strategy') or DEFAULT_STRATEGY}, which trains in "
                                f"this process (no worker is started); leave {named(name)} "
                                "out")

    def plan(self, config, strategy, model, data):
        return plan_in_process(config, data)

    def place_data(self, bundle):
        bundle.materialize_()

    def train(self, job):
        attempt.train_in_process(job)


class WorkerLauncher(Launcher):
    """mptrain's own worker processes, started, watched and stopped by its supervisor."""

    starts_processes = True

    def plan(self, config, strategy, model, data):
        return plan_workers(config, strategy, model, data)

    def place_data(self, bundle):
        bundle.share_memory_()

    def train(self, job):
        attempt.train_on_workers(job)


class TorchrunLauncher(Launcher):
    """This process is one rank of a job an external launcher (torchrun) started: it joins
    the job's process group, rank 0 speaks for the run and writes its outputs, and a job
    torchrun restarts resumes from the last checkpoint in --out by itself."""

    #: Settings the launcher owns, and what to use instead (ours in braces: each caller is
    #: told its own spelling, ``config.in_callers_words``).
    OWNED = {"workers": "--nproc-per-node (and --nnodes) of torchrun",
             "start_method": "nothing: torchrun starts the processes",
             "sharing_strategy": "nothing: the ranks of a node map the same files in "
                                 "/dev/shm",
             "max_restarts": "--max-restarts of torchrun; mptrain then resumes from the "
                             "last checkpoint in {out} by itself"}

    def __init__(self, world: ExternalWorld):
        super().__init__()
        self.world = world

    def plan(self, config, strategy, model, data):
        return plan_under_launcher(config, strategy, self.world, data)

    def refuse_settings(self, given):
        from ..config import in_callers_words

        for name, instead in self.OWNED.items():
            if name in given:
                raise UserError(f"{named(name)} does nothing under "
                                f"{self.world.launcher}, which starts the processes itself; "
                                f"use {in_callers_words(instead)}")

    def presenter_role(self):
        """Rank 0 shows the run, and each other node's first rank the notes about its own
        machine, on that node's terminal -- a warning can concern one node alone (its cores,
        its memory), and node 0 never sees node 1's."""
        if self.world.rank == 0:
            return {}
        if self.world.local_rank != 0:
            return {"silent": True}
        return {"other_node": f"node {self.world.node} (rank {self.world.rank})"}

    @property
    def writes_outputs(self):
        return self.world.rank == 0

    def join(self, config, plan, out, resume):
        from . import torchrun

        # The group exists before anything else: resuming needs it after a restart.
        attempt = torchrun.join(self.world, plan.comm.torch_backend, config.worker_timeout)
        joined = Joined(resume=resume, run_info={torchrun.RUN_ID_KEY: torchrun.run_id()},
                        restartable=torchrun.may_restart())
        if resume is None:
            joined.resume = torchrun.elastic_resume(out, config, self.world, attempt)
            if joined.resume is not None:
                joined.notes.append(f"torchrun restarted the job: resuming after "
                                    f"{config.unit} {joined.resume.epoch} from the "
                                    f"checkpoint in {out}")
        if joined.restartable and out is None:
            joined.notes.append("torchrun may restart this job (--max-restarts) but without "
                                f"{named('out')} no checkpoint is written: a restart starts "
                                "from the beginning")
        return joined

    def train(self, job):
        attempt.train_under_launcher(job, self.world)

    def describe_stop(self, signum):
        return (f"rank {self.world.rank} stopped by {signal.Signals(signum).name} (torchrun "
                "stops every rank when one fails or when it is stopped itself)")

    def finish(self):
        from .lifecycle import leave

        # gloo's teardown aborts now and then after the work is done; torchrun would
        # report that finished rank as failed.
        leave(0)


def choose_launcher(strategy_class) -> Launcher:
    """The launcher of a run of ``strategy_class``: torchrun's when this process is one of
    its ranks, else the calling process or mptrain's own workers, as the strategy says."""
    world = detect_external_world()
    if world is not None:
        if not strategy_class.runs_under_torchrun:
            from ..strategies.registry import strategy_classes

            able = ", ".join(n for n, c in strategy_classes().items() if c.runs_under_torchrun)
            raise UserError(f"strategy {strategy_class.name!r} cannot run under "
                            f"{world.launcher}: only {able} work across processes it starts "
                            "(hogwild needs one machine's shared memory); use "
                            f"{named('strategy')} ddp or sync")
        return TorchrunLauncher(world)
    stray = stray_rank_variables()
    notes = (stray,) if stray else ()
    if strategy_class.in_process:
        return InProcessLauncher(notes)
    return WorkerLauncher(notes)


def out_for(launcher: Launcher, out: str | Path | None) -> str | Path | None:
    """The --out folder this process writes (None where another process writes it)."""
    return out if launcher.writes_outputs else None
