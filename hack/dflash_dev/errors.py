"""The one error type of the dev tooling: a message for the user, never a traceback."""


class DevError(Exception):
    """Something the user can fix: the message says what is missing and how to get it."""
