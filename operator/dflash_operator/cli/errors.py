"""Exit codes of `kubectl dflash` and the one error type its commands raise: a message for
the user, never a traceback (main.py prints it as `error: <message>`)."""

from __future__ import annotations

EXIT_OK = 0
# Anything that went wrong: an unknown run, an API error, logs that cannot be read.
EXIT_ERROR = 1
# Bad flags or arguments (argparse's own code, as kubectl uses for usage errors).
EXIT_USAGE = 2
# `audit`: a gate failed and is not approved; the same code the stage entry points use.
EXIT_GATE_FAILED = 3
# Interrupted with Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure the user can act on; `message` says what and, where possible, what to do."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
