"""How a server's event streams behave: heartbeat, lifetime and the caps on open streams
(``create_app(streams=...)``, ``fairlane serve --max-streams ...``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fairlane.errors import ConfigurationError

DEFAULT_HEARTBEAT_S = 15.0
# A stream ends after this long; an EventSource reconnects by itself and reads the state again,
# so a connection a proxy silently dropped cannot hold a place forever.
DEFAULT_LIFETIME_S = 3600.0


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """``heartbeat_s``: a ``: keep-alive`` comment after this much silence; ``lifetime_s``: a
    stream ends after this long; ``per_environment`` and ``total``: the most open streams of
    one environment and of the server (None: the defaults of ``slots.py``)."""

    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    lifetime_s: float = DEFAULT_LIFETIME_S
    per_environment: int | None = None
    total: int | None = None

    def __post_init__(self) -> None:
        for name in ("heartbeat_s", "lifetime_s"):
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value <= 0:
                raise ConfigurationError(f"{name} is a positive number of seconds, not {value!r}")
