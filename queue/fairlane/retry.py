"""Retry backoff: exponential with jitter, as a pure function of the attempt number."""

from __future__ import annotations

import random
from dataclasses import dataclass

from fairlane.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry n = min(max_s, uniform[1, 2) * min_s * factor^(n-1)).

    The jitter spreads retries of runs that failed together, so they do not come back as a herd.
    """

    min_s: float = 1.0
    max_s: float = 60.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if self.min_s < 0 or self.max_s < self.min_s or self.factor < 1:
            raise ConfigurationError(
                f"invalid backoff {self}: need 0 <= min_s <= max_s, factor >= 1"
            )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        jitter = (rng or random).uniform(1.0, 2.0)
        return min(self.max_s, jitter * self.min_s * self.factor ** max(0, attempt - 1))


DEFAULT_BACKOFF = Backoff()
