"""Error types that reach users as one-line messages instead of tracebacks."""


class HornnError(Exception):
    """Base class of every user-facing error; its message is one line naming the problem and the fix."""


class ConfigError(HornnError, ValueError):
    """A configuration key has a wrong name, type or value."""


class DataError(HornnError):
    """Input data is missing, malformed, or inconsistent with its manifest."""


class CheckpointError(HornnError):
    """A checkpoint is missing, incomplete, or incompatible with the run."""
