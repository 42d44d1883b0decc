"""Cron ticks across daylight-saving changes, against an oracle that walks UTC minute by
minute: a tick is the first instant at which the zone's clock reads a matching wall time or
later. So a wall time a fall-back repeats fires once (its first occurrence), one a
spring-forward skips fires at the end of the gap, and ``last_tick(t) <= t < next_tick(t)``.

Real zones (30-minute DST in Lord Howe, +12:45/+13:45 in Chatham, Kathmandu's 15-minute change
to +5:45) and a zone read from a TZif file written here, with 2-hour changes."""

from __future__ import annotations

import bisect
import functools
import io
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane.cron.expressions import last_tick, next_tick
from tests.helpers.tzif import LocalTime, tzif_bytes, zones_on_path

MINUTE = timedelta(minutes=1)
# Deterministic (the same examples on every run) and no example database on disk.
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)


def two_hour_zone() -> bytes:
    """+01:00, and +03:00 from the end of March to the end of October: the clock jumps from
    02:00 to 04:00 and goes back from 04:00 to 02:00, two hours each time."""
    standard, summer = LocalTime(3600, False, "SYN"), LocalTime(3 * 3600, True, "SYND")
    changes = []
    for year in range(2020, 2036):
        changes.append((datetime(year, 3, 29, 1, tzinfo=UTC), 1))
        changes.append((datetime(year, 10, 25, 1, tzinfo=UTC), 0))
    return tzif_bytes([standard, summer], changes)


SYNTHETIC_NAME = "Fairlane_Test/Two_Hours"
SYNTHETIC = ZoneInfo.from_file(io.BytesIO(two_hour_zone()), key=SYNTHETIC_NAME)


@pytest.fixture(scope="module", autouse=True)
def synthetic_zone_by_name(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The cron functions are given the zone's name, as a schedule row holds it."""
    with zones_on_path(tmp_path_factory.mktemp("zones"), {SYNTHETIC_NAME: two_hour_zone()}):
        yield


ZONES: dict[str, tzinfo] = {
    name: ZoneInfo(name)
    for name in (
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Pacific/Chatham",
        "Asia/Kathmandu",
    )
}
ZONES[SYNTHETIC_NAME] = SYNTHETIC
# Whole-minute expressions (the oracle's resolution), one with a seconds field.
CRONS = [
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "30 * * * *",
    "0 2 * * *",
    "30 2 * * *",
    "45 2 * * *",
    "0 3 * * *",
    "15 1-4 * * *",
    "5 0 * * *",
    "0 */20 * * * *",
]


def offset(zone: tzinfo, at: datetime) -> timedelta:
    found = at.astimezone(zone).utcoffset()
    assert found is not None
    return found


def changes_of(zone: tzinfo, first_year: int, last_year: int) -> list[datetime]:
    """The instants at which the zone's offset changes, found day by day, then to the second."""
    found = []
    day = datetime(first_year, 1, 1, tzinfo=UTC)
    while day.year <= last_year:
        following = day + timedelta(days=1)
        if offset(zone, day) != offset(zone, following):
            low, high = int(day.timestamp()), int(following.timestamp())
            while high - low > 1:
                middle = (low + high) // 2
                if offset(zone, datetime.fromtimestamp(middle, UTC)) == offset(zone, following):
                    high = middle
                else:
                    low = middle
            found.append(datetime.fromtimestamp(high, UTC))
        day = following
    return found


CHANGES = {
    name: changes_of(zone, 1985, 1987) + changes_of(zone, 2024, 2030)
    for name, zone in ZONES.items()
}
assert all(CHANGES.values()), "every zone changes offset in these years"


def wall(zone: tzinfo, at: datetime) -> datetime:
    return at.astimezone(zone).replace(tzinfo=None)


@functools.cache
def matching_walls(cron: str, start: datetime, end: datetime) -> list[datetime]:
    """The wall times in (start, end] the expression matches."""
    walls = croniter(cron, start, second_at_beginning=len(cron.split()) == 6)
    return list(itertools.takewhile(lambda found: found <= end, walls.all_next(datetime)))


@functools.cache
def oracle(zone_name: str, cron: str, change: datetime) -> list[datetime]:
    """The ticks within 30 hours of ``change``, minute by minute: a minute is a tick when the
    clock reads at it a matching wall time it has never shown before (a gap's end: any of
    the wall times skipped, or its own)."""
    zone = ZONES[zone_name]
    start, end = change - timedelta(hours=30), change + timedelta(hours=30)
    walls = matching_walls(cron, wall(zone, start) - timedelta(hours=3), wall(zone, end))
    ticks = []
    shown = wall(zone, start - MINUTE)  # far from any change: the highest shown yet
    at = start
    while at <= end:
        now_shows = wall(zone, at)
        first_new = bisect.bisect_right(walls, shown)
        if first_new < len(walls) and walls[first_new] <= now_shows:
            ticks.append(at)
        shown = max(shown, now_shows)
        at += MINUTE
    return ticks


moments = st.sampled_from(sorted(ZONES)).flatmap(
    lambda name: st.tuples(
        st.just(name),
        st.sampled_from(CHANGES[name]),
        st.sampled_from(CRONS),
        st.integers(min_value=-4 * 3600 * 10**6, max_value=4 * 3600 * 10**6),
    )
)


@PROPERTY
@given(moments)
def test_ticks_agree_with_the_minute_by_minute_oracle(
    moment: tuple[str, datetime, str, int],
) -> None:
    name, change, cron, shift = moment
    at = change + timedelta(microseconds=shift)
    expected = oracle(name, cron, change)
    assert last_tick(cron, name, at) == [tick for tick in expected if tick <= at][-1]
    assert next_tick(cron, name, at) == next(tick for tick in expected if tick > at)
    # Walked tick by tick over the change (the moment is within 4 hours of it).
    horizon = change + timedelta(hours=8)
    walked: list[datetime] = []
    following = next_tick(cron, name, at)
    while following <= horizon:
        walked.append(following)
        following = next_tick(cron, name, following)
    assert walked == [tick for tick in expected if at < tick <= horizon]


@PROPERTY
@given(moments, st.sampled_from(["*/10 * * * * *", "30 */7 * * * *", "0 0 2 * * *"]))
def test_ticks_are_ordered_and_fire_each_wall_time_once(
    moment: tuple[str, datetime, str, int], seconds_cron: str
) -> None:
    name, change, minute_cron, shift = moment
    zone, given = ZONES[name], name
    at = change + timedelta(microseconds=shift)
    for cron in (minute_cron, seconds_cron):
        last, following = last_tick(cron, given, at), next_tick(cron, given, at)
        assert last <= at < following
        assert next_tick(cron, given, last) == following, "no tick between last and next"
        assert last_tick(cron, given, following - timedelta(microseconds=1)) == last
        ticks = [last, following]
        while len(ticks) < 40:
            ticks.append(next_tick(cron, given, ticks[-1]))
        for earlier, later in itertools.pairwise(ticks):
            assert earlier < later
            assert wall(zone, earlier) < wall(zone, later), "a wall time fired twice"
        for tick in ticks:
            assert_is_a_tick(cron, zone, tick)


def assert_is_a_tick(cron: str, zone: tzinfo, tick: datetime) -> None:
    """The clock reads a matching time at ``tick``, or the clock jumped forward at ``tick``
    over a matching time."""
    shows = wall(zone, tick)
    with_seconds = len(cron.split()) == 6
    if croniter.match(cron, shows, second_at_beginning=with_seconds):
        return
    before = wall(zone, tick - timedelta(microseconds=1))
    assert shows - before > timedelta(seconds=1), f"{tick} shows {shows}, matching nothing"
    skipped = croniter(cron, before, second_at_beginning=with_seconds).get_next(datetime)
    assert skipped < shows, f"{tick} ends a gap with no matching time in it"


# -- the cases the properties were found from ---------------------------------------------


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_a_repeated_hour_fires_its_first_occurrence_never_a_future_one() -> None:
    # Berlin 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00Z; 00:31Z is 02:31 CEST.
    assert last_tick("30 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 31)) == utc(
        2026, 10, 25, 0, 30
    )
    # 20 s before the second 02:00: the day's 02:00 was the first one, an hour ago.
    assert last_tick("0 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 59, 40)) == utc(
        2026, 10, 25, 0, 0
    )
    assert next_tick("0 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 59, 40)) == utc(
        2026, 10, 26, 1, 0
    )
    # New York 2026-11-01: 02:00 EDT becomes 01:00 EST at 06:00Z; 05:30Z is 01:30 EDT.
    assert last_tick("0 * * * *", "America/New_York", utc(2026, 11, 1, 5, 30)) == utc(
        2026, 11, 1, 5, 0
    )
    hourly = [utc(2026, 11, 1, 4, 30)]
    for _ in range(3):
        hourly.append(next_tick("0 * * * *", "America/New_York", hourly[-1]))
    # 01:00 EDT, then 02:00 EST: the repeated 01:00 (EST) fires nothing.
    assert hourly[1:] == [utc(2026, 11, 1, 5), utc(2026, 11, 1, 7), utc(2026, 11, 1, 8)]


def test_a_time_a_half_hour_gap_skips_fires_at_the_gap_end() -> None:
    # Lord Howe 2026-10-04: 02:00 +10:30 becomes 02:30 +11:00 at 15:30Z.
    hours = [utc(2026, 10, 3, 14, 0)]
    for _ in range(3):
        hours.append(next_tick("0 * * * *", "Australia/Lord_Howe", hours[-1]))
    lord_howe = ZoneInfo("Australia/Lord_Howe")
    assert [hour.astimezone(lord_howe).strftime("%H:%M%z") for hour in hours[1:]] == [
        "01:00+1030",
        "02:30+1100",
        "03:00+1100",
    ]


def test_the_synthetic_zone_repeats_and_skips_two_hours() -> None:
    # 2026-10-25 01:00Z: 04:00 +03:00 becomes 02:00 +01:00; every 02:00-03:59 fired before.
    quarter = [utc(2026, 10, 24, 23, 30)]
    for _ in range(4):
        quarter.append(next_tick("*/30 * * * *", SYNTHETIC_NAME, quarter[-1]))
    assert [wall(SYNTHETIC, tick).strftime("%H:%M") for tick in quarter[1:]] == [
        "03:00",
        "03:30",
        "04:00",
        "04:30",
    ]
    assert quarter[3] - quarter[2] == timedelta(hours=2, minutes=30)
    assert last_tick("0 3 * * *", SYNTHETIC_NAME, utc(2026, 10, 25, 2, 30)) == utc(2026, 10, 25, 0)
    # 2026-03-29 01:00Z: 02:00 +01:00 becomes 04:00 +03:00: 02:xx and 03:xx fire at 01:00Z.
    assert next_tick("30 2 * * *", SYNTHETIC_NAME, utc(2026, 3, 29)) == utc(2026, 3, 29, 1)
    assert next_tick("*/15 * * * *", SYNTHETIC_NAME, utc(2026, 3, 29, 0, 50)) == utc(2026, 3, 29, 1)
    assert next_tick("*/15 * * * *", SYNTHETIC_NAME, utc(2026, 3, 29, 1)) == utc(2026, 3, 29, 1, 15)
