"""The busiest concurrency keys as Prometheus series (``fairlane_queue_key_runs``): the keys
holding the most runs, at most KEY_SERIES_PER_QUEUE of a queue and KEY_SERIES in all, whatever
the number of keys; at 10,000 keys the statement reads runs through indexes only. Its time is
printed, not asserted (docs/testing.md)."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
import pytest

from fairlane.engine import engine
from fairlane.metrics import DatabaseCollector
from fairlane.metrics.keys import KEY_SERIES, KEY_SERIES_PER_QUEUE
from tests.helpers.keyed_runs import add_keys
from tests.helpers.metrics import Samples, scrape

SERIES = "fairlane_queue_key_runs"


def key_series(found: Samples) -> dict[tuple[str, str, str], dict[str, float]]:
    """The key series scraped: {(environment, queue, key): {status: runs}}."""
    keys: dict[tuple[str, str, str], dict[str, float]] = {}
    for (name, pairs), value in found.items():
        if name == SERIES:
            labels = dict(pairs)
            place = (labels["environment"], labels["queue"], labels["key"])
            keys.setdefault(place, {})[labels["status"]] = value
    return keys


def test_the_series_are_the_busiest_keys_within_their_bounds(
    db: psycopg.Connection[Any],
) -> None:
    assert (KEY_SERIES, KEY_SERIES_PER_QUEUE) == (20, 5)
    # One hot queue: eight keys of 49 down to 42 runs, two of each running.
    add_keys(db, "acme", "hot", [(f"h{i:02d}", 2, 47 - i + 1) for i in range(1, 9)])
    # Thirty quiet queues of one key each, of 1 to 30 queued runs; keyless runs besides.
    for i in range(30):
        add_keys(db, "other", f"q{i:02d}", [("only", 0, i + 1)])
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
        " SELECT 'acme', 'hot', 'work', '{}', 'QUEUED' FROM generate_series(1, 500)"
    )
    shown = key_series(scrape(DatabaseCollector(db.info.dsn)))

    # The hot queue's five busiest keys (its other three are busier than every quiet queue,
    # and left out by the per-queue bound), then the fifteen busiest quiet queues' keys.
    hot = {
        ("acme", "hot", f"h{i:02d}"): {"EXECUTING": 2, "QUEUED": 47 - i + 1} for i in range(1, 6)
    }
    quiet = {
        ("other", f"q{i:02d}", "only"): {"EXECUTING": 0, "QUEUED": i + 1} for i in range(15, 30)
    }
    assert shown == {**hot, **quiet}
    for absent in [("acme", "hot", f"h{i:02d}") for i in (6, 7, 8)] + [
        ("other", f"q{i:02d}", "only") for i in range(15)
    ]:
        assert absent not in shown
    # The statement's own order: the most runs first.
    ordered = engine("fairlane").metrics.keys(KEY_SERIES_PER_QUEUE, KEY_SERIES)
    found = [row[2] + "@" + row[1] for row in db.execute(ordered.sql, ordered.params).fetchall()]
    assert found[:6] == ["h01@hot", "h02@hot", "h03@hot", "h04@hot", "h05@hot", "only@q29"]


def test_no_keys_no_series(db: psycopg.Connection[Any]) -> None:
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
        " VALUES ('acme', 'default', 'work', '{}', 'QUEUED')"
    )
    assert key_series(scrape(DatabaseCollector(db.info.dsn))) == {}


KEYS = 10_000


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


@pytest.mark.slow
def test_ten_thousand_keys_keep_the_series_bounded(
    db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """10,000 keys over 100 queues of 10 environments (1 to 3 queued runs each, every tenth key
    one running), behind 100,000 ended runs of history; one key far busier than the rest."""
    started = time.perf_counter()
    for e in range(10):
        for q in range(10):
            keys = [
                (f"k{n:05d}", int(n % 10 == 0), n % 3 + 1)
                for n in range(e * 1000 + q * 100, e * 1000 + q * 100 + 100)
            ]
            add_keys(db, f"tenant-{e}", f"queue-{q}", keys)
    add_keys(db, "tenant-7", "queue-7", [("whale", 3, 400)])
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status, finished_at)"
        " SELECT 'tenant-' || (i % 10), 'queue-' || (i % 10), 'work', '{}', 'COMPLETED',"
        "        now() - interval '1 day'"
        " FROM generate_series(1, 100000) i"
    )
    db.execute("ANALYZE fairlane.runs")
    filled_s = time.perf_counter() - started

    took: list[float] = []
    for _ in range(2):  # the first scrape sets the fresh rows' hint bits
        begun = time.perf_counter()
        shown = key_series(scrape(DatabaseCollector(db.info.dsn)))
        took.append((time.perf_counter() - begun) * 1000)
    assert len(shown) == KEY_SERIES
    assert shown[("tenant-7", "queue-7", "whale")] == {"EXECUTING": 3, "QUEUED": 400}
    per_queue: dict[tuple[str, str], int] = {}
    for environment, queue, _key in shown:
        per_queue[environment, queue] = per_queue.get((environment, queue), 0) + 1
    assert max(per_queue.values()) <= KEY_SERIES_PER_QUEUE

    statement = engine("fairlane").metrics.keys(KEY_SERIES_PER_QUEUE, KEY_SERIES)
    with psycopg.ClientCursor(db) as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement.sql, statement.params)
        row = cursor.fetchone()
    assert row is not None
    plan = (json.loads(row[0]) if isinstance(row[0], str) else row[0])[0]
    nodes = _nodes(plan["Plan"])
    on_runs = [node for node in nodes if node.get("Relation Name") == "runs"]
    assert on_runs
    assert all("Seq" not in node["Node Type"] for node in on_runs), [
        (node["Node Type"], node.get("Index Name")) for node in on_runs
    ]
    indexes = sorted({str(node["Index Name"]) for node in nodes if "Index Name" in node})
    assert "runs_queued_key_idx" in indexes
    live = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE status IN ('QUEUED', 'EXECUTING')"
    ).fetchone()
    assert live is not None
    with capsys.disabled():
        print(
            f"\n[key series] {KEYS:,} keys, {live[0]:,} live runs, filled in"
            f" {filled_s:.1f} s: scrapes {took[0]:.0f} ms then {took[1]:.0f} ms; key_series"
            f" {plan['Execution Time']:.1f} ms in the database through {', '.join(indexes)}",
            flush=True,
        )
