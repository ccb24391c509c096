"""Command line: parse flags, hand over, present errors.

No training logic lives here. Every user mistake becomes one line on stderr and exit code 2.
Each sub-command is a module of this package (``run``, ``rl``, ``bench``, ``partitions``,
``plot``, ``tools``).
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

import click

from ..errors import (Interrupted, RunInterrupted, TrainingDiverged, UserError,
                      WorkerFailedError)
from ..launch import openmp
from ..launch.lifecycle import exit_after_cleanup, sigterm_raises
from . import bench, partitions, plot, rl, run, tools  # noqa: F401  (each registers its command)
from .app import cli

# click >= 8.2 raises this for a bare `mptrain`; older versions print the help themselves.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv=None) -> int:
    # Before sigterm_raises is in place (the interpreter's start, the imports above) a
    # SIGTERM or SIGHUP ends the command by its default action: not a stop lost, and no
    # worker or file exists yet that a clean stop would have to see to.
    try:
        with sigterm_raises():
            return _main(argv)
    # Outside the block: a stop that sigterm_raises still owed as the work ended (it landed
    # where Python could not raise it) is raised as the block ends, and is a stop too.
    except KeyboardInterrupt as interrupt:   # a stopped run's RunInterrupted among them
        _interrupted(interrupt, "interrupted; every worker was stopped")
    except Interrupted as stop:
        _fail(f"stopped by signal {stop.signum}; every worker was stopped", 128 + stop.signum)


def _main(argv) -> int:
    try:
        # Not standalone, click returns a command's Exit(code) instead of raising it.
        code = cli.main(args=argv, prog_name="mptrain", standalone_mode=False)
    except _NO_ARGS_IS_HELP as err:
        click.echo(err.ctx.get_help() if err.ctx else "usage: mptrain COMMAND --help")
        return 0
    except click.exceptions.UsageError as err:
        hint = f" (see: mptrain {err.ctx.info_name if err.ctx else ''} --help)".replace(
            "mptrain mptrain", "mptrain")
        _fail(err.format_message() + hint, 2)
    except click.exceptions.Abort as abort:
        # click turns every KeyboardInterrupt into Abort, a stopped run's too.
        _interrupted(abort, "interrupted")
    except UserError as err:
        _fail(str(err), err.exit_code)
    except (WorkerFailedError, TrainingDiverged) as err:
        _fail(str(err), err.exit_code)
    except click.exceptions.Exit as done:
        return done.exit_code
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def console() -> None:
    """The ``mptrain`` command: ``main`` then a quick exit (``main`` itself returns, so tests
    and embedding code can call it)."""
    openmp.this_process_is_the_command()
    answered, code = False, None
    try:
        try:
            code = main()
        except SystemExit as done:
            code = done.code
        answered = True
        # The work is over and every worker reaped: a Ctrl-C now (the second of an
        # impatient user) would only cut the exit handlers short, with a traceback of its own.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:
        # One that came as main() answered, before it could be ignored: the answer stands
        # (the run is over and reported). One that came while main() was saying how a run
        # stopped (a second Ctrl-C): that run was stopped.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if not answered:
            code = 128 + signal.SIGINT
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    exit_after_cleanup(code)


def _interrupted(error: BaseException, otherwise: str) -> NoReturn:
    """Exit with the stopped run's own report (where it stopped, how to resume) when
    ``error`` carries one -- a second Ctrl-C while the stop unwinds has it in its context --
    else with ``otherwise``."""
    stop = _stop_in(error)
    if stop is None:
        _fail(otherwise, 130)
    click.echo(f"mptrain: {stop}", err=True)
    sys.exit(stop.exit_code)


def _stop_in(error: BaseException) -> RunInterrupted | None:
    """The stopped run's own report in ``error``'s chain, if there is one."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, RunInterrupted):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _fail(message: str, code: int):
    click.echo(f"mptrain: error: {message}", err=True)
    sys.exit(code)
