"""The durability policy string a log or a consumer group is opened with, parsed in one place."""

from __future__ import annotations

__all__ = ["parse_durability"]


def parse_durability(spec: str) -> tuple[str, float]:
    """("always"|"every"|"never", interval in seconds) from a policy string.

    >>> parse_durability("every:5")
    ('every', 0.005)
    """
    if spec in ("always", "never"):
        return spec, 0.0
    if spec.startswith("every:"):
        try:
            ms = float(spec[6:])
        except ValueError:
            ms = -1.0
        if ms > 0:
            return "every", ms / 1000.0
    raise ValueError(f"durability must be 'always', 'never' or 'every:<ms>' (ms > 0), not {spec!r}")
