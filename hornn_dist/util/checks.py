"""Value checks of the configs and the layer API: each raises one ConfigError naming the key."""

from __future__ import annotations

from hornn_dist.util.errors import ConfigError


def check_choice(key: str, value: str, allowed: tuple[str, ...], where: str = "") -> None:
    """Raise ConfigError (a ValueError) unless value is one of `allowed`."""
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}{where}; got {value!r}")


def check_count(key: str, value: int, least: int = 1, note: str = "") -> None:
    """Raise ConfigError (a ValueError) unless value is an integer >= `least`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{key} must be an integer >= {least}{note}, got {value!r}")


def check_at_least(key: str, value: int | float, low: int | float) -> None:
    """Raise ConfigError unless value >= low."""
    if value < low:
        raise ConfigError(f"{key} must be >= {low}, got {value}")


def check_at_most(key: str, value: int | float, high: int | float, why: str = "") -> None:
    """Raise ConfigError unless value <= high; `why` says where the bound comes from."""
    if value > high:
        raise ConfigError(f"{key} must be <= {_number(high)}{why}, got {_number(value)}")


def _number(value: int | float) -> str:
    """Return an int in full and a float short (1e+300, not 300 digits)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def check_positive(key: str, value: float) -> None:
    """Raise ConfigError unless value > 0."""
    if not value > 0:
        raise ConfigError(f"{key} must be > 0, got {value}")


def check_in_range(key: str, value: float, lo: float, hi: float, hi_open: bool = False) -> None:
    """Raise ConfigError unless lo <= value <= hi (value < hi when hi_open)."""
    if value < lo or value > hi or (hi_open and value == hi):
        bracket = ")" if hi_open else "]"
        raise ConfigError(f"{key} must be in [{lo}, {hi}{bracket}, got {value}")
