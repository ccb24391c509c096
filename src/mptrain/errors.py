"""Error types whose messages are meant for the person at the terminal.

A :class:`UserError` is a mistake the user can fix (bad flag, missing file, bad factory):
the CLI prints its message on one line and exits with code 2, never a traceback.
"""


class UserError(Exception):
    """A problem in the user's input, with a message that says what is wrong and how to fix it."""

    exit_code = 2


class WorkerFailedError(RuntimeError):
    """A worker process failed; ``failures`` holds one record per failed rank."""

    exit_code = 1

    def __init__(self, message, failures=()):
        super().__init__(message)
        self.failures = tuple(failures)
