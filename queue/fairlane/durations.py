"""Durations as trigger options take them: seconds, a timedelta, or a string such as "2h30m".

Every duration option (delay, ttl, max_duration, idempotency_ttl, the debounce delays) goes
through ``seconds``, so they all accept the same forms and refuse the same mistakes with the
same typed error, before anything is sent to the database.
"""

from __future__ import annotations

import re
from datetime import timedelta
from math import isfinite

from fairlane.errors import InvalidDurationError, TriggerOptionError

# Longest duration accepted (100 years): past it the database's interval and timestamp
# arithmetic overflows, which would abort the caller's transaction.
MAX_SECONDS = 100 * 365 * 86_400

UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
# One or more "<number><unit>" parts, largest first by convention but not by rule: "1h30m",
# "90s", "1.5h", "500ms". A bare number is seconds.
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d|w)\s*)+")
_BARE = re.compile(r"\d+(?:\.\d+)?")

Duration = float | int | timedelta | str


def parse_duration_string(option: str, text: str) -> float:
    """Seconds in a duration string; raises ``InvalidDurationError`` naming ``text``."""
    compact = text.strip().lower()
    if _BARE.fullmatch(compact):
        return float(compact)
    if not compact or not _WHOLE.fullmatch(compact):
        raise InvalidDurationError(option, text)
    return sum(float(number) * UNIT_SECONDS[unit] for number, unit in _PART.findall(compact))


def seconds(option: str, value: Duration | None) -> float | None:
    """A duration option in seconds (None stays None), checked to lie in [0, MAX_SECONDS]."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidDurationError(option, value)
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, int | float):
        # Compared before the conversion: an int past a double's range cannot be one.
        result = float(value) if -MAX_SECONDS <= value <= MAX_SECONDS else float("inf")
    elif isinstance(value, str):
        result = parse_duration_string(option, value)
    else:
        raise InvalidDurationError(option, value)
    if not (isfinite(result) and 0 <= result <= MAX_SECONDS):
        raise TriggerOptionError(
            option, value, f"must be a number of seconds between 0 and {MAX_SECONDS}"
        )
    return result
