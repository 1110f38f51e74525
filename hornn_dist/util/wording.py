"""Small wording helpers shared by the log lines and messages."""

from __future__ import annotations


def counted(n: int | float, noun: str, plural: str = "") -> str:
    """Return `n noun` with the noun plural unless n is 1: "1 epoch", "3 epochs", "0 runs"
    (`plural` where adding an s is wrong: "2 processes")."""
    return f"{n:g} {noun}" if n == 1 else f"{n:g} {plural or noun + 's'}"


def fmt_duration(seconds: float) -> str:
    """Return a wall-clock time as "1h02m", "3m05s" or "4.2s"."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
