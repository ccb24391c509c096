"""Error types whose messages are meant for the person at the terminal.

A :class:`UserError` is a mistake the user can fix (bad flag, missing file, bad factory):
the CLI prints its message on one line and exits with code 2, never a traceback.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable


class UserError(Exception):
    """A problem in the user's input, with a message that says what is wrong and how to fix it."""

    exit_code = 2


class WorkerFailedError(RuntimeError):
    """A worker process failed; ``failures`` holds one record per failed rank."""

    exit_code = 1

    def __init__(self, message, failures=()):
        super().__init__(message)
        self.failures = tuple(failures)

    @property
    def headline(self) -> str:
        """The first line of the message, without the tracebacks."""
        return str(self).splitlines()[0] if str(self) else "a worker failed"


class TrainingDiverged(Exception):
    """The training loss or the model's parameters became non-finite (NaN or infinite): the
    run stops before a checkpoint of that round is written, so the last good one is kept."""

    exit_code = 1


class Interrupted(BaseException):
    """SIGTERM (or another stop signal) arrived; raised like KeyboardInterrupt for SIGINT."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by a signal; the message says where and how to resume. A
    KeyboardInterrupt, as the Ctrl-C it usually comes from: a caller's ``except Exception``
    (a sweep that logs a failed fit() and goes on) must not swallow the stop."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class ClientFailedError(RuntimeError):
    """A simulated federated client raised during its local training (names client, round
    and rank; ``--accept-failures`` drops such clients instead)."""


# -- how the user wrote a setting ---------------------------------------------------------------
# The same check serves the command line (``--batch-size``), a config file (``batch-size =``)
# and Python (``fit(batch_size=...)``): its message names the setting as the caller wrote it,
# since a Python caller told about ``--workers`` must translate it back. The resolver
# (``mptrain.settings``) sets the spelling around each layer it checks.

def as_flag(name: str) -> str:
    """The command line's spelling: ``--batch-size``."""
    return "--" + name.replace("_", "-")


_spelling: ContextVar[Callable[[str], str]] = ContextVar("mptrain_setting_spelling",
                                                         default=as_flag)


def setting_name(name: str) -> str:
    """Setting ``name`` (``batch_size``) as the caller wrote it: ``--batch-size`` on the
    command line (the default), ``batch_size`` from Python, the key as written in a config
    file."""
    return _spelling.get()(name)


def python_caller() -> bool:
    """Whether the caller is Python (``fit()``, ``rl.fit()``): advice that names a command
    line (``mptrain run --resume``) has a Python counterpart to say instead."""
    return _spelling.get() is as_keyword


def current_spelling() -> Callable[[str], str]:
    """The spelling in force, for worker processes to name settings as the caller did (a
    spawned worker starts without the parent's context)."""
    return _spelling.get()


@contextmanager
def spelled(spelling: Callable[[str], str]):
    """Name settings with ``spelling`` in the messages raised inside the block."""
    token = _spelling.set(spelling)
    try:
        yield
    finally:
        _spelling.reset(token)


def as_keyword(name: str) -> str:
    """Python's spelling: the keyword argument itself."""
    return name


def closest(name: str, choices, cutoff: float = 0.6) -> str | None:
    """The choice ``name`` most likely misspells, or None: what every "did you mean ...?"
    of a one-line refusal names."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(name, choices, cutoff: float = 0.6, spell=str) -> str:
    """`` (did you mean X?)`` for the choice ``name`` most likely misspells, or ``""``: the
    one wording of every refusal's suggestion (``spell`` writes the choice: ``repr``, a
    setting's flag). Only for a string: a number or None misspells nothing."""
    close = closest(name, choices, cutoff) if isinstance(name, str) else None
    return f" (did you mean {spell(close)}?)" if close else ""


def brief(message: str, limit: int = 200) -> str:
    """The first line of ``message`` (torch's run on for paragraphs), cut to ``limit``
    characters at the end of a sentence, else at a word (marked ``…``)."""
    text = message.strip()
    first = text.splitlines()[0].strip() if text else ""
    if len(first) <= limit:
        return first
    head = first[:limit + 1]
    end = head.rfind(". ")
    if end > 0:
        return head[:end + 1]
    space = head.rfind(" ")
    return (head[:space] if space > 0 else first[:limit]).rstrip() + " …"


@contextmanager
def raised_by_users_code(what: str, advice: str = ""):
    """The block calls the user's code (a factory, a Dataset, a model's forward pass): an
    exception from it is a one-line ``UserError`` -- ``{what} raised {error_line}``, then
    ``; {advice}`` when given -- not a traceback through mptrain. A ``UserError`` the code
    raises itself passes on as it is."""
    try:
        yield
    except UserError:
        raise
    except Exception as err:
        raise UserError(f"{what} raised {error_line(err)}" + (f"; {advice}" if advice else "")
                        ) from None


def error_line(err: BaseException) -> str:
    """``err`` in one line for a note: its type and the :func:`brief` first line of its
    message (the type alone when there is none)."""
    first = brief(str(err))
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def exception_line(formatted: str, limit: int = 200) -> str:
    """The line of a formatted traceback (``traceback.format_exc()``) that names what was
    raised -- its type and the first line of its message, :func:`brief` -- of a chain, the
    exception raised last. Not the text's last line, which is the last line of a multi-line
    message ("(2x4 and 8x2)"); text without a traceback's header gives its last line."""
    lines = formatted.strip().splitlines()
    headers = [at for at, line in enumerate(lines)
               if line.startswith("Traceback (most recent call last):")]
    if not headers:
        return lines[-1] if lines else ""
    # The frames and their code are indented; the exception's line is the first that is not.
    rest = lines[headers[-1] + 1:]
    for at, line in enumerate(rest):
        if line and not line[0].isspace():
            kind, colon, message = line.partition(": ")
            if colon and not message.strip():   # the message starts on the next line
                message = next((more for more in rest[at + 1:] if more.strip()), "")
            return f"{kind}: {brief(message, limit)}" if message.strip() else kind
    return lines[-1]
