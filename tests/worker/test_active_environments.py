"""The claim serves the environments known to have work, and finds the ones that gain work.

A claim without a full scan reads only environments marked active; one that cannot be filled
from them scans anyway; a worker asks for a scan whenever a notification announces work.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, TriggerRequest, Worker, trigger_many
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import claim_and_complete, running, wait_until

pytestmark = pytest.mark.anyio


def bulk(db: psycopg.Connection[Any], environment: str, count: int) -> None:
    trigger_many(db, [TriggerRequest("noop", i, environment=environment) for i in range(count)])


def active(db: psycopg.Connection[Any]) -> set[str]:
    rows = db.execute("SELECT name FROM fairlane.environments WHERE NOT drained").fetchall()
    return {row[0] for row in rows}


async def claim(
    conn: psycopg.AsyncConnection[Any], store: LeaseStore, limit: int, *, full_scan: bool
) -> Counter[str]:
    claimed = await claim_and_complete(conn, store, limit, full_scan=full_scan)
    return Counter(run.environment for run in claimed)


async def test_known_environments_are_served_until_a_scan_finds_new_work(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    bulk(db, "A", 100)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await claim(conn, store, 10, full_scan=True) == {"A": 10}
        assert active(db) == {"A"}
        bulk(db, "B", 5)
        # A fills the claim on its own: B stays unseen until a scan is asked for.
        assert await claim(conn, store, 10, full_scan=False) == {"A": 10}
        assert active(db) == {"A"}
        # B joins level with A (no credit for the time it had nothing) and, served longest
        # ago, takes its turn first.
        assert await claim(conn, store, 10, full_scan=True) == {"B": 5, "A": 5}
        assert active(db) == {"A"}


async def test_a_claim_the_known_environments_cannot_fill_looks_for_more(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    bulk(db, "A", 12)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await claim(conn, store, 10, full_scan=True) == {"A": 10}
        bulk(db, "C", 20)
        assert await claim(conn, store, 10, full_scan=False) == {"A": 2, "C": 8}
        assert active(db) == {"C"}
        # With nothing known at all (the idle case) the claim finds new work by itself.
        assert await claim(conn, store, 20, full_scan=False) == {"C": 12}
        assert active(db) == set()
        bulk(db, "D", 3)
        assert await claim(conn, store, 10, full_scan=False) == {"D": 3}


async def test_a_full_claim_that_empties_an_environment_leaves_it_to_the_next_claim(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """A claim that got all it asked for does not look whether its environment drained (the
    look walks the queued index's dead head): the environment stays active, and the next claim,
    finding nothing there, marks it drained."""
    bulk(db, "E", 10)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await claim(conn, store, 10, full_scan=True) == {"E": 10}
        assert active(db) == {"E"}
        assert await claim(conn, store, 10, full_scan=False) == {}
        assert active(db) == set()


async def test_a_worker_busy_with_one_environment_picks_up_another_when_notified(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("noop")
    async def noop(ctx: RunContext, payload: Any) -> None:
        await anyio.sleep(0.005)

    bulk(db, "A", 2_000)
    # A alone keeps every claim full, and a 30 s poll interval rules out the periodic scan:
    # only the notification of B's trigger can make the worker look.
    worker = Worker(tasks, dsn, concurrency=5, poll_interval=30.0, run_periodic_jobs=False)

    def queued(environment: str) -> int:
        row = db.execute(
            "SELECT count(*) FROM fairlane.runs WHERE environment = %s AND status = 'QUEUED'",
            (environment,),
        ).fetchone()
        return int(row[0]) if row else 0

    async with running(worker):
        await wait_until(lambda: queued("A") < 1_990, within=10, what="A to start")
        bulk(db, "B", 1)
        await wait_until(lambda: queued("B") == 0, within=10, what="B's run to start")
        assert queued("A") > 0
