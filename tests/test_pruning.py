"""Pruning: finished runs past retention are deleted in bounded batches; live runs never."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, TriggerRequest, Worker, maintenance, trigger_many
from tests.helpers import running, statuses, wait_until

pytestmark = pytest.mark.anyio


def prune(db: psycopg.Connection[Any]) -> dict[str, int]:
    row = db.execute("SELECT fairlane.prune_finished_runs()").fetchone()
    assert row is not None
    return dict(row[0])


def test_old_finished_runs_are_deleted_in_batches(db: psycopg.Connection[Any]) -> None:
    finished = trigger_many(db, [TriggerRequest("t", i) for i in range(2500)])
    db.execute(
        "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now() - interval '8 days' "
        "WHERE id = ANY(%s)",
        (finished,),
    )
    recent = trigger_many(db, [TriggerRequest("t", i) for i in range(10)])
    db.execute(
        "UPDATE fairlane.runs SET status = 'FAILED', finished_at = now() WHERE id = ANY(%s)",
        (recent,),
    )
    trigger_many(db, [TriggerRequest("t", i) for i in range(10)])  # still queued
    maintenance.set_setting(db, "prune_batch_size", 1000)
    maintenance.set_setting(db, "prune_max_batches", 2)
    assert prune(db) == {"deleted": 2000, "statements": 2}
    assert prune(db) == {"deleted": 500, "statements": 1}
    assert prune(db) == {"deleted": 0, "statements": 1}
    assert statuses(db) == {"FAILED": 10, "QUEUED": 10}


async def test_the_runs_table_stays_small_under_a_soak(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    maintenance.set_setting(db, "prune_retention_s", 0.2)
    maintenance.configure_job(db, "prune_finished_runs", interval_s=0.1)
    tasks = TaskRegistry()

    @tasks.task("t")
    async def handler(ctx: RunContext, payload: Any) -> None:
        return None

    sizes = []
    async with running(Worker(tasks, dsn, concurrency=20, periodic_interval=0.05)):
        for wave in range(10):
            trigger_many(db, [TriggerRequest("t", i) for i in range(1000)])
            await wait_until(
                lambda: set(statuses(db)) <= {"COMPLETED"}, what=f"wave {wave} to finish"
            )
            sizes.append(sum(statuses(db).values()))
        await wait_until(lambda: sum(statuses(db).values()) == 0, what="everything pruned")
    # 10,000 runs went through; with 0.2 s retention the table only ever held the last few
    # waves (how many depends on how fast waves drain, so the bound leaves room for that).
    assert max(sizes) <= 4000, sizes
