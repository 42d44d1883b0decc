"""Cron expressions: five fields (minute hour day month weekday), or six with a seconds field
first (second minute hour day month weekday), in an IANA time zone.

A tick is a wall-clock time in the zone that the expression matches, and it fires at the first
instant at which the zone's clock reads that time or later. So across a daylight-saving change:

- a wall time that a spring-forward skips fires at the first instant after the gap (the
  transition itself; several ticks in the gap are one instant, so one fire);
- a wall time that a fall-back repeats fires once, at its first occurrence: while the clock
  reads the repeated hour again it fires nothing it showed already.

croniter only enumerates the matching wall times, on naive datetimes (calendar arithmetic, no
zone: the DST errors of croniter on aware datetimes never arise); mapping them to instants is
done here with zoneinfo and ``fold``. The mapping is monotonic, so ``last_tick(now) <= now <
next_tick(now)`` and the ticks in between agree whichever side one walks from.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from fairlane.errors import ConfigurationError

_EPSILON = timedelta(microseconds=1)


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
    """The first tick of ``cron`` in ``timezone`` strictly after ``after`` (an aware
    datetime), in UTC: a datetime of the zone at a repeated wall time would compare unequal
    to every datetime of another zone (PEP 495)."""
    zone = _zone(timezone)
    shown, reached = _clock_high(zone, after)
    # The first wall time the clock has not shown by ``after``: past the highest it showed,
    # or that highest itself when the clock only came near it (it went back just before).
    wall = _matching(cron, shown if reached else shown - _EPSILON, forward=True)
    return _first_reading(zone, wall)


def last_tick(cron: str, timezone: str, at_or_before: datetime) -> datetime:
    """The latest tick at or before ``at_or_before`` (never after it), in UTC."""
    zone = _zone(timezone)
    shown, reached = _clock_high(zone, at_or_before)
    wall = _matching(cron, shown + _EPSILON if reached else shown, forward=False)
    return _first_reading(zone, wall)


def _matching(cron: str, start: datetime, *, forward: bool) -> datetime:
    """The first wall time the expression matches strictly after (or before) naive ``start``."""
    walls = croniter(cron, start, second_at_beginning=_with_seconds(cron))
    found: datetime = walls.get_next(datetime) if forward else walls.get_prev(datetime)
    return found


def _clock_high(zone: tzinfo, at: datetime) -> tuple[datetime, bool]:
    """The highest wall time (naive) the zone's clock has shown up to the instant ``at``, and
    whether it showed it: within a fall-back's repeated period (``fold=1``) the clock has come
    up to the wall time at which it went back, but never showed it."""
    local = at.astimezone(zone)
    if not local.fold:
        return local.replace(tzinfo=None), True
    before, after = _offset(local.replace(fold=0)), _offset(local)
    went_back = _transition(zone, at - (before - after), at)
    return (went_back + before).replace(tzinfo=None), False


def _offset(local: datetime) -> timedelta:
    offset = local.utcoffset()
    assert offset is not None  # a zoneinfo zone always has one
    return offset


def _first_reading(zone: tzinfo, wall: datetime) -> datetime:
    """The first instant (UTC) at which the zone's clock reads ``wall`` (naive) or later: its
    only instant, the earlier of two in a repeated period, the end of a gap it falls in."""
    earlier = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if earlier.astimezone(zone).replace(tzinfo=None) == wall:
        return earlier
    # In a gap, fold=0 reads the wall time with the offset before the change (an instant
    # after the change) and fold=1 with the one after (an instant before it).
    before_gap = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return _transition(zone, before_gap, earlier)


def _transition(zone: tzinfo, old: datetime, new: datetime) -> datetime:
    """The instant of the one offset change in ``(old, new]`` (aware instants whose offsets
    differ). Zones change offset on whole seconds: a bisection over seconds finds it."""
    target = new.astimezone(zone).utcoffset()
    low, high = math.floor(old.timestamp()), math.ceil(new.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == target:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)
