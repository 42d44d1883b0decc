"""An item's decisions under concurrent transactions: the carrier's item lock, the failure of
an item, the orphan pass, and an abort that overtakes a carrier."""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from fairlane.batches.processing import BatchItemProcessor
from tests.helpers import wait_until
from tests.helpers.batch_steps import (
    ABORT_SQL,
    batch_state,
    create_batch,
    fail_item_sql,
    ingest,
    item_states,
    lock_item,
    lock_item_sql,
    past_deadline,
    plain_run,
    record_item_sql,
)
from tests.helpers.interleave import sessions


def item_runs(db: psycopg.Connection[Any], batch_id: int) -> list[tuple[Any, ...]]:
    rows = db.execute(
        "SELECT batch_index, status FROM fairlane.runs WHERE batch_id = %s ORDER BY batch_index",
        (batch_id,),
    )
    return [tuple(row) for row in rows.fetchall()]


def test_a_second_carrier_of_an_item_waits_then_finds_it_done(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    batch = create_batch(db, "env", 1)
    ingest(db, batch, [0])
    run = plain_run(db)
    with sessions(dsn, 2) as (first, second):
        first.begin()
        lock_item(first, batch, 0)
        first.run(*record_item_sql(batch, 0, run))
        second.begin()
        locking = second.start(*lock_item_sql(batch, 0))
        second.blocked()
        first.commit()
        # The redelivered carrier sees the item done, so it makes no second run.
        assert locking.result(timeout=10)[0][0] == "TRIGGERED"
        second.commit()
    assert item_runs(db, batch) == [(0, "QUEUED")]
    assert batch_state(db, batch) == ("COMPLETED", True, 1, 0, 1)


def test_two_failures_of_one_item_make_one_pre_failed_run(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    batch = create_batch(db, "env", 1)
    ingest(db, batch, [0])
    with sessions(dsn, 2) as (first, second):
        first.begin()
        [(made,)] = first.run(*fail_item_sql(batch, 0))
        assert made is not None
        second.begin()
        failing = second.start(*fail_item_sql(batch, 0))
        second.blocked()  # on the item's row lock
        first.commit()
        assert failing.result(timeout=10) == [(None,)]
        second.commit()
    assert item_runs(db, batch) == [(0, "SYSTEM_FAILURE")]
    assert batch_state(db, batch) == ("PARTIAL_FAILED", True, 0, 1, 1)


def test_the_orphan_pass_skips_an_item_a_carrier_holds(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    batch = create_batch(db, "env", 2)
    ingest(db, batch, [0, 1])
    # Both carriers ended without making their runs (as when a worker died on the last
    # attempt); a redelivered carrier of item 0 is still at work.
    db.execute(
        "UPDATE fairlane.runs SET status = 'CRASHED', finished_at = now() "
        "WHERE task = 'fairlane.batch_item'"
    )
    run = plain_run(db)
    with sessions(dsn, 2) as (carrier, orphans):
        carrier.begin()
        lock_item(carrier, batch, 0)
        assert orphans.run(ABORT_SQL)[0][0] == {"aborted": 0, "orphaned_items": 1}
        carrier.run(*record_item_sql(batch, 0, run))
        carrier.commit()
        assert orphans.run(ABORT_SQL)[0][0] == {"aborted": 0, "orphaned_items": 0}
    assert item_states(db, batch) == {0: "TRIGGERED", 1: "FAILED"}
    failed = db.execute(
        "SELECT error ->> 'code' FROM fairlane.runs WHERE batch_id = %s AND batch_index = 1",
        (batch,),
    ).fetchone()
    assert failed == ("BATCH_ITEM_COULD_NOT_TRIGGER",)
    assert batch_state(db, batch) == ("PARTIAL_FAILED", True, 1, 1, 2)


def waiters_of(db: psycopg.Connection[Any], pid: int) -> int:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
    ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.anyio
async def test_a_carrier_an_abort_overtakes_makes_no_run(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    batch = create_batch(db, "env", 2)
    ingest(db, batch, [0])
    past_deadline(db, batch)
    processor = BatchItemProcessor(dsn, "fairlane")
    outcome: dict[str, Any] = {}
    ctx: Any = type("Ctx", (), {"is_last_attempt": False, "environment": "env"})()

    async def carrier() -> None:
        outcome.update(await processor.process(ctx, {"batch_id": batch, "index": 0}))

    try:
        with sessions(dsn, 1) as (abort,):
            abort.begin()
            assert abort.run(ABORT_SQL)[0][0]["aborted"] == 1
            async with anyio.create_task_group() as group:
                group.start_soon(carrier)
                # The carrier read the batch as PENDING, made the run, and now waits for the
                # batch row to count it.
                await wait_until(lambda: waiters_of(db, abort.pid) == 1, what="carrier waiting")
                await anyio.to_thread.run_sync(abort.commit)
    finally:
        await processor.close()
    assert outcome == {"skipped": "batch aborted"}
    assert item_states(db, batch) == {0: "SKIPPED"}
    assert db.execute("SELECT count(*) FROM fairlane.runs WHERE task = 'echo'").fetchone() == (0,)
    assert batch_state(db, batch)[:4] == ("ABORTED", False, 0, 0)
