"""Cron expressions: five fields (minute hour day month weekday), or six with a seconds field
first (second minute hour day month weekday), in an IANA time zone, DST-correct (croniter on
zoneinfo: a local time that a spring-forward skips fires at the first time after it, one that a
fall-back repeats fires at each).
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from fairlane.errors import ConfigurationError


def _zone(timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"unknown time zone {timezone!r}") from None


def _with_seconds(cron: str) -> bool:
    return len(cron.split()) == 6


def check_cron(cron: str, timezone: str = "UTC") -> None:
    """Raise ``ConfigurationError`` unless ``cron`` is a cron expression of 5 or 6 fields and
    ``timezone`` a known zone."""
    _zone(timezone)
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        raise ConfigurationError(f"cron {cron!r}: give 5 fields, or 6 with seconds first")
    if not croniter.is_valid(cron, second_at_beginning=_with_seconds(cron)):
        raise ConfigurationError(f"cron {cron!r} is not a valid cron expression")


def next_tick(cron: str, timezone: str, after: datetime) -> datetime:
    """The first tick strictly after ``after`` (an aware datetime), in ``timezone``."""
    start = after.astimezone(_zone(timezone))
    ticks = croniter(cron, start, second_at_beginning=_with_seconds(cron))
    found: datetime = ticks.get_next(datetime)
    return found


def last_tick(cron: str, timezone: str, at_or_before: datetime) -> datetime:
    """The latest tick at or before ``at_or_before``."""
    start = at_or_before.astimezone(_zone(timezone))
    ticks = croniter(cron, start, second_at_beginning=_with_seconds(cron))
    found: datetime = ticks.get_prev(datetime)
    if next_tick(cron, timezone, found) <= start:
        found = next_tick(cron, timezone, found)
    return found
