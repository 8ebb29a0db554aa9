"""User-causable errors of the data stages (exit code 2) and one-line pydantic error messages."""

from __future__ import annotations

from pydantic import ValidationError


class BadInputError(Exception):
    """Bad input a user can fix: the message names the file or field, the value, what is accepted."""


def is_user_fixable(storage_error: Exception) -> bool:
    """A missing object or refused credentials (exit 2), as opposed to an unreachable or failing
    store (exit 1: the Job retries). Matches the messages of `dflash_trainer.storage`."""
    text = str(storage_error)
    return text.endswith("does not exist") or "was refused" in text or "is not an S3 URI" in text


def format_validation_error(error: ValidationError, where: str) -> str:
    """`where: field.path: problem (got value)` for the first error, plus a count of the rest."""
    first = error.errors()[0]
    loc = ".".join(
        f"[{part}]" if isinstance(part, int) else str(part) for part in first["loc"]
    ).replace(".[", "[")
    value = first.get("input")
    shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    msg = first["msg"]
    more = len(error.errors()) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}: {loc or '(top level)'}: {msg} (got {shown}){tail}"
