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
from fairlane.worker.claim_floors import MAX_FLOORS, ClaimFloors
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
    ids = queue_runs(db, 12)
    floors = ClaimFloors()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        first = await claim(conn, store, floors, 3, full_scan=True)
        assert [run.id for run in first] == ids[:3]
        assert len(floors) == 1
        assert floors.for_claim(full_scan=False) is None, "a queue claimed from once"
        second = await claim(conn, store, floors, 3, full_scan=False)
        assert [run.id for run in second] == ids[3:6]
        # A run that sorts first (priority 60: queued a minute earlier) arrives behind the floor.
        urgent = trigger(db, "t", "urgent", priority=60)
        floored = await claim(conn, store, floors, 3, full_scan=False)
        assert [run.id for run in floored] == ids[6:9], "the floor passes over the urgent run"
        # The next full scan is made without floors: the urgent run comes first.
        scanned = await claim(conn, store, floors, 3, full_scan=True)
        assert [run.id for run in scanned] == [urgent, *ids[9:11]]


async def test_a_short_claim_drops_the_floors(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    ids = queue_runs(db, 6)
    floors = ClaimFloors()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert [run.id for run in await claim(conn, store, floors, 2, full_scan=True)] == ids[:2]
        assert [run.id for run in await claim(conn, store, floors, 2, full_scan=False)] == ids[2:4]
        # A run handed back keeps its place in the queue: it sorts before the floor.
        db.execute(
            "UPDATE fairlane.runs SET status = 'QUEUED', lease_token = NULL, lease_until = NULL,"
            " worker_id = NULL WHERE id = %s",
            (ids[0],),
        )
        short = await claim(conn, store, floors, 5, full_scan=False)
        assert [run.id for run in short] == ids[4:6], "the floor passes over the handed-back run"
        assert len(floors) == 0, "a short claim leaves no floor"
        again = await claim(conn, store, floors, 5, full_scan=False)
        assert [run.id for run in again] == [ids[0]]


async def test_floors_are_kept_per_queue_and_a_full_scan_sets_them_afresh(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    # Queued in turns, so that the claim order alternates between the queues.
    ids = trigger_many(
        db, [TriggerRequest("t", i, queue=("mail", "sms")[i % 2]) for i in range(16)]
    )
    mail, sms = ids[0::2], ids[1::2]
    floors = ClaimFloors()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await claim(conn, store, floors, 4, full_scan=True)
        assert floors.for_claim(full_scan=False) is None, "each queue claimed from once"
        await claim(conn, store, floors, 4, full_scan=False)
        sent = floors.for_claim(full_scan=False)
        assert sent is not None
        environments, queues, orders, run_ids = sent
        assert sorted(zip(environments, queues, run_ids, strict=True)) == [
            ("default", "mail", mail[3]),
            ("default", "sms", sms[3]),
        ]
        assert all(isinstance(order, datetime) for order in orders)
        assert floors.for_claim(full_scan=True) is None
        rest = await claim(conn, store, floors, 4, full_scan=False)
        assert sorted(run.id for run in rest) == sorted([*mail[4:6], *sms[4:6]])
        sent = floors.for_claim(full_scan=False)
        assert sent is not None
        assert sorted(sent[3]) == sorted([mail[5], sms[5]])
        # A full scan that claims from the queues again keeps their floors sent.
        await claim(conn, store, floors, 4, full_scan=True)
        sent = floors.for_claim(full_scan=False)
        assert sent is not None
        assert sorted(sent[3]) == sorted([mail[7], sms[7]])


AT = datetime(2026, 1, 1)


def claimed_run(
    run_id: int, queue: str, seconds: float, environment: str = "default"
) -> ClaimedRun:
    return ClaimedRun(
        run_id,
        uuid.uuid4(),
        "t",
        None,
        1,
        3,
        environment,
        queue,
        {},
        None,
        None,
        AT + timedelta(seconds=seconds),
    )


def test_floors_keep_the_latest_position_of_each_queue() -> None:
    floors = ClaimFloors()
    run = claimed_run
    # Out of order, as RETURNING gives them; an equal queue order is decided by id.
    floors.claimed([run(9, "a", 2), run(3, "a", 5), run(4, "a", 5), run(7, "b", 1)], 4, False)
    assert floors.for_claim(full_scan=False) is None, "no queue was claimed from twice"
    floors.claimed([run(2, "a", 3), run(8, "b", 0.5)], 2, False)
    sent = floors.for_claim(full_scan=False)
    assert sent is not None
    assert sorted(zip(sent[1], sent[2], sent[3], strict=True)) == [
        ("a", AT + timedelta(seconds=5), 4),
        ("b", AT + timedelta(seconds=1), 7),
    ]
    floors.claimed([run(1, "a", 0)], 1, True)
    sent = floors.for_claim(full_scan=False)
    assert sent is not None
    assert sent[3] == [1], "a full scan replaces every floor"


def test_floors_of_queues_claimed_from_once_are_not_sent() -> None:
    """Claims over many environments that each take from queues they never took from before
    send no floor, however many are kept; a queue taken from again is sent, and only it."""
    floors = ClaimFloors()
    for n in range(3 * MAX_FLOORS):
        floors.claimed([claimed_run(n, "default", n, environment=f"env-{n}")], 1, False)
        assert floors.for_claim(full_scan=False) is None
    assert len(floors) == MAX_FLOORS
    last = f"env-{3 * MAX_FLOORS - 1}"
    floors.claimed([claimed_run(10_000, "default", 10_000, environment=last)], 1, False)
    sent = floors.for_claim(full_scan=False)
    assert sent is not None
    assert (sent[0], sent[3]) == ([last], [10_000])
    # Pushed out of the kept floors, a queue starts over.
    floors.claimed([claimed_run(10_001, "default", 10_001, environment="env-0")], 1, False)
    sent = floors.for_claim(full_scan=False)
    assert sent is not None
    assert sent[0] == [last]


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
    # The queues' walks: the locking reads of the keyless queued index (the round's lock of
    # its environments reads that index too, but only to look for a queued run, index only).
    walks = [
        plan
        for plan in plans
        if "Index Scan using runs_queued_keyless_idx" in plan and "LockRows" in plan
    ]
    assert walks
    for plan in walks:
        assert re.search(r"Index Cond: .*ROW\(queue_order, id\) > ROW\(", plan), plan
