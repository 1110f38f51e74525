"""Error types that reach users as one-line messages instead of tracebacks."""


class HornnError(Exception):
    """Base class of every user-facing error; its message is one line naming the problem and the fix."""


class ConfigError(HornnError, ValueError):
    """A configuration key has a wrong name, type or value."""


class DataError(HornnError):
    """Input data is missing, malformed, or inconsistent with its manifest."""


class CheckpointError(HornnError):
    """A checkpoint is missing, incomplete, or incompatible with the run."""


def first_line(err: BaseException, default: str | None = None) -> str:
    """Return the first line of an exception's message; without one, `default` (or its type's name)."""
    text = str(err).strip()
    if text:
        return text.splitlines()[0]
    return type(err).__name__ if default is None else default


def described(err: BaseException, limit: int = 300) -> str:
    """Return `Type: first line of the message` of an exception, at most `limit` characters."""
    return f"{type(err).__name__}: {first_line(err, '')}"[:limit]
