"""Batch decisions under concurrent transactions, stepped statement by statement.

Lock order (docs/concurrency.md): batch items before the batch row. Ingest inserts its items,
then locks the batch to count and seal; a carrier locks its item, then bumps the batch's
counters with its COMMIT.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import psycopg

from tests.batch_steps import (
    batch_state,
    create_batch,
    ingest,
    ingest_sql,
    lock_item,
    plain_run,
    record_item_sql,
)
from tests.interleave import STEP_TIMEOUT, Rows, Session, sessions


def commit_in_turn(*pending: tuple[Session, Future[Rows]]) -> None:
    """Sessions whose statements wait for one another's locks in some order: commit each as
    its statement finishes (the rest then go on). A deadlock fails here."""
    left = list(pending)
    while left:
        ready = [(s, f) for s, f in left if not s.blocked_or_done()]
        cycle = {s.name: s.blockers() for s, _ in left}
        assert ready, f"every session waits for another (a deadlock): {cycle}"
        for session, statement in ready:
            statement.result(timeout=STEP_TIMEOUT)
            session.commit()
            left.remove((session, statement))


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
        # Either gets the batch row and commits; the other follows it. (Before items were
        # locked ahead of the batch, the resend held the batch and waited for item 0.)
        commit_in_turn((second, recording), (resend, resending))
    assert recording.result() == [(True,)]
    accepted, received, run_count, sealed, status = resending.result()[0]
    assert (accepted, received, run_count, sealed, status) == (1, 3, 3, True, "PROCESSING")
    assert batch_state(db, batch) == ("PROCESSING", True, 2, 0, 3)
