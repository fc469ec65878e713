"""Event-time tumbling windows, half-open ``[start, start + size)``.

Pure window math (no broker): every timestamp falls in exactly one window of
each resolution. A resolution keeps its windows for ``retention_seconds``
after the window *ends*; a trace whose window has already expired at ``now``
is *late* for that resolution — it is still counted in the cumulative
totals and in every coarser resolution whose window is still retained, and
the ``late`` counter says how many traces missed at least one resolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resolution:
    name: str                 # "1m", "1h"
    size_seconds: int
    retention_seconds: int

    def __post_init__(self) -> None:
        if self.size_seconds <= 0:
            raise ValueError(f"window size_seconds must be > 0, got {self.size_seconds} ({self.name})")
        if self.retention_seconds < self.size_seconds:
            raise ValueError(f"window retention_seconds must be >= size_seconds ({self.size_seconds}), "
                             f"got {self.retention_seconds} ({self.name})")

    def start(self, ts: float) -> int:
        """Start of the window holding ``ts``."""
        return math.floor(ts / self.size_seconds) * self.size_seconds

    def ranges(self, ts: float) -> tuple[int, int]:
        start = self.start(ts)
        return start, start + self.size_seconds

    def expired(self, window_start: int, now: float) -> bool:
        return window_start + self.size_seconds + self.retention_seconds <= now

    def expire_at(self, window_start: int) -> int:
        """Epoch second at which the window is dropped."""
        return window_start + self.size_seconds + self.retention_seconds

    def starts_between(self, start: float, end: float) -> list[int]:
        """Starts of the windows overlapping ``[start, end)``."""
        if end <= start:
            return []
        first = self.start(start)
        return list(range(first, math.ceil(end), self.size_seconds))


def resolutions_for(minute_retention_seconds: float, hour_retention_seconds: float) -> tuple[Resolution, ...]:
    """The two tumbling windows: ``1m`` and ``1h`` with the given retentions."""
    return (Resolution("1m", 60, int(minute_retention_seconds)),
            Resolution("1h", 3600, int(hour_retention_seconds)))


MINUTE = Resolution("1m", 60, 48 * 3600)
HOUR = Resolution("1h", 3600, 35 * 24 * 3600)
DEFAULT_RESOLUTIONS = (MINUTE, HOUR)


def parse_duration(text: str) -> float:
    """``"90s"``, ``"5m"``, ``"2h"``, ``"7d"`` or plain seconds → seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value = text.strip()
    try:
        if value and value[-1] in units:
            seconds = float(value[:-1]) * units[value[-1]]
        else:
            seconds = float(value)
    except ValueError:
        raise ValueError(f"duration must look like 90s, 5m, 2h or 7d, got {text!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"duration must be > 0, got {text!r}")
    return seconds
