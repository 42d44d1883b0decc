"""Ingest's decisions under concurrent transactions, stepped statement by statement.

Lock order (docs/concurrency.md): batch items before the batch row. Ingest inserts its items
(in index order), then locks the batch to decide whether it still takes items, to count them
and to seal it; a carrier locks its item, then bumps the batch's counters with its COMMIT.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.helpers.batch_steps import (
    ABORT_SQL,
    batch_state,
    commit_in_turn,
    create_batch,
    ingest,
    ingest_sql,
    lock_item,
    past_deadline,
    plain_run,
    record_item_sql,
)
from tests.helpers.interleave import sessions


def carriers(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM fairlane.runs WHERE task = 'fairlane.batch_item'")
    found = row.fetchone()
    return int(found[0]) if found else 0


def test_a_resend_while_carriers_record_items_waits_instead_of_deadlocking(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    batch = create_batch(db, "env", 3)
    ingest(db, batch, [0, 1])
    runs = [plain_run(db), plain_run(db)]
    with sessions(dsn, 3) as (first, resend, second):
        # A carrier of item 1 recorded it and is committing: it holds item 1 and the batch.
        first.begin()
        lock_item(first, batch, 1)
        first.run(*record_item_sql(batch, 1, runs[1]))
        # The resend of every item waits for it.
        resend.begin()
        resending = resend.start(*ingest_sql(batch, [0, 1, 2]))
        resend.blocked()
        # Meanwhile the carrier of item 0 marks its item and waits for the batch's counters.
        second.begin()
        lock_item(second, batch, 0)
        recording = second.start(*record_item_sql(batch, 0, runs[0]))
        second.blocked()
        first.commit()
        # Either gets the batch row and commits; the other follows it. (When ingest locked
        # the batch before its items, the resend held the batch and waited for item 0.)
        commit_in_turn((second, recording), (resend, resending))
    assert recording.result() == [(True,)]
    assert resending.result() == [(1, 3, 3, True, "PROCESSING")]
    assert batch_state(db, batch) == ("PROCESSING", True, 2, 0, 3)


def test_two_ingests_of_one_index_make_one_item(dsn: str, db: psycopg.Connection[Any]) -> None:
    batch = create_batch(db, "env", 3)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        assert a.run(*ingest_sql(batch, [0, 1])) == [(2, 2, 3, False, "PENDING")]
        b.begin()
        second = b.start(*ingest_sql(batch, [2, 1]))
        b.blocked()  # on a's uncommitted item 1
        a.commit()
        assert second.result(timeout=10) == [(1, 3, 3, True, "PROCESSING")]
        b.commit()
    assert carriers(db) == 3
    payloads = db.execute("SELECT index, payload FROM fairlane.batch_items ORDER BY index")
    assert payloads.fetchall() == [(0, 0), (1, 1), (2, 2)]


def test_the_last_of_two_ingests_counts_every_item_and_seals(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    batch = create_batch(db, "env", 2)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        assert a.run(*ingest_sql(batch, [0])) == [(1, 1, 2, False, "PENDING")]
        b.begin()
        second = b.start(*ingest_sql(batch, [1]))
        b.blocked()  # its item is in; it waits for the batch row to count
        a.commit()
        assert second.result(timeout=10) == [(1, 2, 2, True, "PROCESSING")]
        b.commit()
    assert batch_state(db, batch) == ("PROCESSING", True, 0, 0, 2)


def test_an_ingest_an_abort_overtakes_keeps_nothing(dsn: str, db: psycopg.Connection[Any]) -> None:
    batch = create_batch(db, "env", 2)
    past_deadline(db, batch)
    with sessions(dsn, 2) as (abort, late):
        abort.begin()
        assert abort.run(ABORT_SQL)[0][0]["aborted"] == 1
        late.begin()
        ingesting = late.start(*ingest_sql(batch, [0, 1]))
        late.blocked()
        abort.commit()
        assert ingesting.result(timeout=10) == [(0, 0, 2, False, "ABORTED")]
        late.commit()
    assert batch_state(db, batch) == ("ABORTED", False, 0, 0, 0)
    assert carriers(db) == 0


def test_the_abort_skips_a_batch_an_ingest_is_sealing(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    batch = create_batch(db, "env", 2)
    past_deadline(db, batch)
    with sessions(dsn, 2) as (sealing, abort):
        sealing.begin()
        assert sealing.run(*ingest_sql(batch, [0, 1])) == [(2, 2, 2, True, "PROCESSING")]
        assert abort.run(ABORT_SQL)[0][0] == {"aborted": 0, "orphaned_items": 0}
        sealing.commit()
        assert abort.run(ABORT_SQL)[0][0] == {"aborted": 0, "orphaned_items": 0}
    assert batch_state(db, batch) == ("PROCESSING", True, 0, 0, 2)


@pytest.mark.parametrize("first", ["carrier", "ingest"])
def test_the_last_item_and_the_seal_finish_the_batch_once(
    dsn: str, db: psycopg.Connection[Any], first: str
) -> None:
    """The carrier of item 0 records it while the ingest that seals the batch pre-fails the
    oversized item 1: whichever takes the batch row second sees both counted and finishes."""
    batch = create_batch(db, "env", 2, parent=plain_run(db))
    ingest(db, batch, [0])
    run = plain_run(db)
    with sessions(dsn, 2) as (carrier, sealing):
        carrier.begin()
        lock_item(carrier, batch, 0)
        sealing.begin()
        if first == "carrier":
            carrier.run(*record_item_sql(batch, 0, run))
            pending = sealing.start(*ingest_sql(batch, [1], oversized=[1]))
            sealing.blocked()
            carrier.commit()
            assert pending.result(timeout=10) == [(1, 2, 2, True, "PARTIAL_FAILED")]
            sealing.commit()
        else:
            sealing.run(*ingest_sql(batch, [1], oversized=[1]))
            pending = carrier.start(*record_item_sql(batch, 0, run))
            carrier.blocked()
            sealing.commit()
            assert pending.result(timeout=10) == [(True,)]
            carrier.commit()
    assert batch_state(db, batch) == ("PARTIAL_FAILED", True, 1, 1, 2)
    waitpoint = db.execute(
        "SELECT w.status, w.output ->> 'succeeded', w.output ->> 'failed' "
        "FROM fairlane.waitpoints w JOIN fairlane.batches b ON b.waitpoint_id = w.id "
        "WHERE b.id = %s",
        (batch,),
    ).fetchone()
    assert waitpoint == ("COMPLETED", "1", "1")
