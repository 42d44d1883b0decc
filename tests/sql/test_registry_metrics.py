"""The registry's series: live workers by version, and the tasks with queued runs that no
live worker serves, with how long their oldest run has been queued."""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane import TriggerRequest, trigger_many
from fairlane.metrics import DatabaseCollector
from fairlane.metrics.registry import UNSERVED_SERIES
from tests.helpers.metrics import labelled, scrape

REGISTER = (
    "INSERT INTO fairlane.workers (id, host, pid, version, tasks, environments, concurrency,"
    " stale_after_s, last_seen_at) VALUES (%s, 'h', 1, %s, %s, %s, 4, 30, now() - %s::interval)"
)


def test_live_workers_by_version_and_unserved_tasks(dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute(REGISTER, ("a", "1.0", ["mail"], None, "1 second"))
    db.execute(REGISTER, ("b", "1.0", ["mail"], ["acme"], "1 second"))
    db.execute(REGISTER, ("c", "1.1", ["report"], None, "1 second"))
    db.execute(REGISTER, ("gone", "0.9", ["report"], None, "1 hour"))
    trigger_many(
        db,
        [
            TriggerRequest("mail", environment="acme"),
            TriggerRequest("bill", environment="acme"),
            TriggerRequest("bill", environment="other"),
            TriggerRequest("report", environment="other"),
        ],
    )
    db.execute(
        "UPDATE fairlane.runs SET queued_at = now() - interval '90 seconds'"
        " WHERE task = 'bill' AND environment = 'acme'"
    )
    found = scrape(DatabaseCollector(dsn))
    assert labelled(found, "fairlane_workers_live", version="1.0") == 2
    assert labelled(found, "fairlane_workers_live", version="1.1") == 1
    assert ("fairlane_workers_live", (("version", "0.9"),)) not in found
    assert labelled(found, "fairlane_workers_registered") == 4
    assert labelled(found, "fairlane_unserved_tasks") == 2
    waited = labelled(
        found, "fairlane_unserved_task_oldest_queued_seconds", environment="acme", task="bill"
    )
    assert 90 <= waited < 3600
    assert (
        labelled(
            found, "fairlane_unserved_task_oldest_queued_seconds", environment="other", task="bill"
        )
        < waited
    )
    unserved = [name for name, _ in found if name.startswith("fairlane_unserved_task_oldest")]
    assert len(unserved) == 2


def test_the_unserved_series_are_bounded(dsn: str, db: psycopg.Connection[Any]) -> None:
    trigger_many(db, [TriggerRequest(f"task-{i}") for i in range(UNSERVED_SERIES + 5)])
    found = scrape(DatabaseCollector(dsn))
    assert labelled(found, "fairlane_unserved_tasks") == UNSERVED_SERIES
    unserved = [name for name, _ in found if name.startswith("fairlane_unserved_task_oldest")]
    assert len(unserved) == UNSERVED_SERIES
