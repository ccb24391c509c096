"""Restart and stop policy for a run: how often failed workers are restarted, from where,
and what a signal turns into. The runners say what a job is; this module decides what
happens when an attempt at it fails or the user stops it."""

from __future__ import annotations

import copy
import signal
from dataclasses import replace
from typing import Callable

from ..errors import Interrupted, RunInterrupted, WorkerFailedError
from ..errors import setting_name as named   # as the caller spelled the setting
from .attempt import Job


def train_with_restarts(job: Job, keeper, recorder, launcher, *, who: str = "workers",
                        command: str = "mptrain run") -> int:
    """Train ``job`` to its end. After a worker failure, restart every worker from the
    keeper's latest checkpoint (or from the initial model), at most ``max_restarts`` times;
    a signal stops the run with a message that says how to resume it. Return the number
    of restarts. ``who`` and ``command`` name the processes and the command in messages."""
    config, model, presenter = job.config, job.model, job.presenter
    initial_state = copy.deepcopy(model.state_dict()) if config.max_restarts else None

    def attempt() -> None:
        latest = keeper.latest
        if latest is not None:
            model.load_state_dict(latest.model)
        elif initial_state is not None:
            model.load_state_dict(initial_state)
        done = latest.epoch if latest else 0
        recorder.start(done)
        launcher.train(replace(job, start_round=done,
                               rank_states=latest.ranks if latest else None))

    def on_restart(failure: WorkerFailedError, restarts: int) -> None:
        presenter.close()
        done = keeper.latest.epoch if keeper.latest else 0
        presenter.note(f"{failure.headline}; restarting the {who} from {config.unit} {done} "
                       f"(restart {restarts} of {config.max_restarts})")

    def describe_stop(signum: int) -> str:
        presenter.close()
        own_words = launcher.describe_stop(signum)
        if own_words is not None:
            return own_words
        where = f"stopped by {signal.Signals(signum).name} after {len(recorder.history)} " \
                f"of {config.units} {config.unit}s; every {who[:-1]} was stopped"
        if keeper.saved_path is not None:
            return (f"{where}; last checkpoint: {config.unit} {keeper.saved_epoch} in "
                    f"{keeper.saved_path}; resume with: {keeper.resume_command(command)}")
        return f"{where}; no checkpoint was written (use {named('out')} DIR " \
               f"{named('checkpoint_every')} 1 to be able to resume)"

    try:
        return run_with_restarts(attempt, config.max_restarts, on_restart, describe_stop)
    finally:
        presenter.close()


def run_with_restarts(attempt: Callable[[], None], max_restarts: int,
                      on_restart: Callable[[WorkerFailedError, int], None],
                      describe_stop: Callable[[int], str]) -> int:
    """Call ``attempt`` until it returns; after a worker failure call ``on_restart`` and try
    again, at most ``max_restarts`` times. Return the number of restarts.

    Ctrl-C and SIGTERM (raised as KeyboardInterrupt / Interrupted) become
    :class:`RunInterrupted` with ``describe_stop(signum)`` and exit code 128 + signum.
    """
    restarts = 0
    try:
        while True:
            try:
                attempt()
                return restarts
            except WorkerFailedError as failure:
                if restarts >= max_restarts:
                    raise
                restarts += 1
                on_restart(failure, restarts)
    except (KeyboardInterrupt, Interrupted) as stop:
        signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
        raise RunInterrupted(describe_stop(signum), 128 + signum) from None
