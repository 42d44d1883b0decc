"""Claim floors: a claim that carries them walks each queue from just after the last run the
worker claimed there, instead of from the head of the queued index. A floor is a hint: what
sorts before it is passed over until a claim without floors, which the worker makes at every
full scan and after every short claim (worker/claim_floors.py)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, trigger, trigger_many
from fairlane.models import ClaimedRun
from fairlane.worker.claim_floors import ClaimFloors
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import log_nested_plans

pytestmark = pytest.mark.anyio

Conn = psycopg.AsyncConnection[Any]


def queue_runs(db: psycopg.Connection[Any], count: int, queue: str = "default") -> list[int]:
    return trigger_many(db, [TriggerRequest("t", i, queue=queue) for i in range(count)])


async def claim(
    conn: Conn, store: LeaseStore, floors: ClaimFloors, asked: int, *, full_scan: bool
) -> list[ClaimedRun]:
    runs = await store.claim(conn, asked, full_scan=full_scan, floors=floors.for_claim(full_scan))
    floors.claimed(runs, asked, full_scan)
    return runs


async def test_a_floor_starts_the_walk_after_the_last_claimed_run(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    ids = queue_runs(db, 10)
    floors = ClaimFloors()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        first = await claim(conn, store, floors, 3, full_scan=True)
        assert [run.id for run in first] == ids[:3]
        assert len(floors) == 1
        # A run that sorts first (priority 60: queued a minute earlier) arrives behind the floor.
        urgent = trigger(db, "t", "urgent", priority=60)
        floored = await claim(conn, store, floors, 3, full_scan=False)
        assert [run.id for run in floored] == ids[3:6], "the floor passes over the urgent run"
        # The next full scan is made without floors: the urgent run comes first.
        scanned = await claim(conn, store, floors, 3, full_scan=True)
        assert [run.id for run in scanned] == [urgent, *ids[6:8]]


async def test_a_short_claim_drops_the_floors(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    ids = queue_runs(db, 4)
    floors = ClaimFloors()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert [run.id for run in await claim(conn, store, floors, 2, full_scan=True)] == ids[:2]
        # A run handed back keeps its place in the queue: it sorts before the floor.
        db.execute(
            "UPDATE fairlane.runs SET status = 'QUEUED', lease_token = NULL, lease_until = NULL,"
            " worker_id = NULL WHERE id = %s",
            (ids[0],),
        )
        short = await claim(conn, store, floors, 5, full_scan=False)
        assert [run.id for run in short] == ids[2:4], "the floor passes over the handed-back run"
        assert len(floors) == 0, "a short claim leaves no floor"
        again = await claim(conn, store, floors, 5, full_scan=False)
        assert [run.id for run in again] == [ids[0]]


async def test_floors_are_kept_per_queue_and_a_full_scan_sets_them_afresh(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    # Queued in turns, so that the claim order alternates between the queues.
    ids = trigger_many(
        db, [TriggerRequest("t", i, queue=("mail", "sms")[i % 2]) for i in range(12)]
    )
    mail, sms = ids[0::2], ids[1::2]
    floors = ClaimFloors()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await claim(conn, store, floors, 4, full_scan=True)
        sent = floors.for_claim(full_scan=False)
        assert sent is not None
        environments, queues, orders, run_ids = sent
        assert sorted(zip(environments, queues, run_ids, strict=True)) == [
            ("default", "mail", mail[1]),
            ("default", "sms", sms[1]),
        ]
        assert all(isinstance(order, datetime) for order in orders)
        assert floors.for_claim(full_scan=True) is None
        rest = await claim(conn, store, floors, 4, full_scan=False)
        assert sorted(run.id for run in rest) == sorted([*mail[2:4], *sms[2:4]])
        sent = floors.for_claim(full_scan=False)
        assert sent is not None
        assert sorted(sent[3]) == sorted([mail[3], sms[3]])


def test_floors_keep_the_latest_position_of_each_queue() -> None:
    floors = ClaimFloors()
    at = datetime(2026, 1, 1)

    def run(run_id: int, queue: str, seconds: float) -> ClaimedRun:
        return ClaimedRun(
            run_id,
            uuid.uuid4(),
            "t",
            None,
            1,
            3,
            "default",
            queue,
            {},
            None,
            None,
            at + timedelta(seconds=seconds),
        )

    # Out of order, as RETURNING gives them; an equal queue order is decided by id.
    floors.claimed([run(9, "a", 2), run(3, "a", 5), run(4, "a", 5), run(7, "b", 1)], 4, False)
    sent = floors.for_claim(full_scan=False)
    assert sent is not None
    assert sorted(zip(sent[1], sent[2], sent[3], strict=True)) == [
        ("a", at + timedelta(seconds=5), 4),
        ("b", at + timedelta(seconds=1), 7),
    ]
    floors.claimed([run(1, "a", 0)], 1, True)
    sent = floors.for_claim(full_scan=False)
    assert sent is not None
    assert sent[3] == [1], "a full scan replaces every floor"


async def test_a_floored_claim_bounds_the_index_walk(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """The floor is an index condition of the queue's walk (a row comparison on queue_order
    and id), so the entries before it are never read: dead ones included."""
    queue_runs(db, 50)
    db.execute("ANALYZE fairlane.runs")
    floors = ClaimFloors()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await claim(conn, store, floors, 5, full_scan=True)
        plans = await log_nested_plans(conn)
        # Past the fifth execution the generic plan must keep the bound too.
        for _ in range(8):
            assert len(await claim(conn, store, floors, 5, full_scan=False)) == 5
    # The queues' walks: the locking reads of the queued index (the round's lock of its
    # environments reads that index too, but only to look for a queued run, index only).
    walks = [
        plan for plan in plans if "Index Scan using runs_queued_idx" in plan and "LockRows" in plan
    ]
    assert walks
    for plan in walks:
        assert re.search(r"Index Cond: .*ROW\(queue_order, id\) > ROW\(", plan), plan
