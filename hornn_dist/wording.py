"""Small wording helpers shared by the log lines and messages."""

from __future__ import annotations


def counted(n: int | float, noun: str, plural: str = "") -> str:
    """Return `n noun` with the noun plural unless n is 1: "1 epoch", "3 epochs", "0 runs"
    (`plural` where adding an s is wrong: "2 processes")."""
    return f"{n:g} {noun}" if n == 1 else f"{n:g} {plural or noun + 's'}"
