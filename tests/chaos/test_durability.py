"""A server crash right after a commit the worker acted on: a claim whose handler already
started, a batch item whose run was made. Each must still be there when the server comes back,
or the handler runs a second time, or the carrier completes with its item's run missing.

The WAL writer is slowed to its longest delay (10 s), has just flushed an asynchronous commit
of its own (so it only writes for the next 10 s), and the worker runs no periodic jobs, so
nothing but the commit itself can flush it before the crash. A durable claim (the default)
waits for that flush before the worker sees the run; a fast claim (``durable_claims=False``)
does not, and is lost: the run is QUEUED again after recovery, and the worker, back within a
poll interval, may have claimed it again under a new lease before the test reads it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, Worker, trigger
from fairlane.batches import AsyncBatchClient
from fairlane.triggering.checks import BATCH_QUEUE
from tests.helpers import running, wait_until
from tests.helpers.batches import batch_row, chunked, ndjson
from tests.helpers.batches import tasks as echo_tasks
from tests.helpers.cluster import Cluster

pytestmark = [pytest.mark.anyio, pytest.mark.chaos, pytest.mark.timeout(120)]


@pytest.fixture
def slow_wal_writer(cluster: Cluster) -> Iterator[None]:
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        admin.execute("ALTER SYSTEM SET wal_writer_flush_after = '1GB'")
        admin.execute("SELECT pg_reload_conf()")
        wal_writer_just_flushed(admin)
    try:
        yield
    finally:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute("ALTER SYSTEM RESET wal_writer_delay")
            admin.execute("ALTER SYSTEM RESET wal_writer_flush_after")
            admin.execute("SELECT pg_reload_conf()")


def wal_writer_just_flushed(admin: psycopg.Connection[Any]) -> None:
    """Have the WAL writer flush an asynchronous commit now. It flushes at once when an
    asynchronous commit wakes it from hibernation (an idle cluster's WAL writer hibernates) and
    its own last flush is older than its delay: the claim's commit would be flushed before the
    crash. Just after a flush of its own, it only writes for the next 10 s."""
    admin.execute("SET synchronous_commit = off")
    row = admin.execute("SELECT txid_current(), pg_current_wal_insert_lsn()").fetchone()
    assert row is not None
    admin.execute("RESET synchronous_commit")
    flushed = "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn"
    deadline = time.monotonic() + 15
    while admin.execute(flushed, (row[1],)).fetchone() != (True,):
        assert time.monotonic() < deadline, "the WAL writer never flushed the commit"
        time.sleep(0.01)


def run_row(dsn: str, run_id: int) -> tuple[Any, ...]:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT status, lease_token, attempts FROM fairlane.runs WHERE id = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return tuple(row)


async def crash_after_claim(
    chaos_dsn: str, cluster: Cluster, *, durable_claims: bool
) -> tuple[tuple[Any, ...], list[Any]]:
    """Crash the server the moment a claimed run's handler starts; the run's status, lease
    token and attempts after recovery, and the lease tokens its handler started under once it
    completed."""
    tasks = TaskRegistry()
    started: list[Any] = []
    first_started = anyio.Event()
    release = anyio.Event()

    @tasks.task("hold")
    async def hold(ctx: RunContext, payload: None) -> None:
        started.append(ctx.run.lease_token)
        first_started.set()
        await release.wait()

    with psycopg.connect(chaos_dsn, autocommit=True) as conn:
        run_id = trigger(conn, "hold")
    worker = Worker(
        tasks,
        chaos_dsn,
        lease_seconds=30,
        poll_interval=0.1,
        run_periodic_jobs=False,
        connect_timeout=2,
        statement_timeout=5,
        shutdown_grace=1,
        durable_claims=durable_claims,
    )
    async with running(worker):
        await first_started.wait()
        await anyio.to_thread.run_sync(cluster.restart, "immediate")
        after_crash = await anyio.to_thread.run_sync(run_row, chaos_dsn, run_id)
        release.set()
        await wait_until(
            lambda: run_row(chaos_dsn, run_id)[0] == "COMPLETED",
            within=30,
            what="the run to complete",
        )
    return after_crash, started


@pytest.mark.usefixtures("slow_wal_writer")
async def test_a_durable_claim_survives_a_crash_right_after_it(
    chaos_dsn: str, cluster: Cluster
) -> None:
    (status, token, attempts), started = await crash_after_claim(
        chaos_dsn, cluster, durable_claims=True
    )
    # Still the running handler's: its outcome was written under this lease.
    assert (status, token, attempts) == ("EXECUTING", started[0], 1)
    assert len(started) == 1


@pytest.mark.usefixtures("slow_wal_writer")
async def test_a_fast_claim_is_lost_in_a_crash_right_after_it(
    chaos_dsn: str, cluster: Cluster
) -> None:
    (status, token, attempts), started = await crash_after_claim(
        chaos_dsn, cluster, durable_claims=False
    )
    # The claim vanished with the crash: the run is QUEUED with the attempt uncounted, or
    # already claimed again under a new lease; either way its handler ran a second time.
    assert token != started[0]
    assert (status, token, attempts) == ("QUEUED", None, 0) or (
        status == "EXECUTING" and attempts == 1
    )
    assert len(started) == 2
    assert started[1] != started[0]


def carrier_and_item(dsn: str, batch_id: int) -> dict[str, str]:
    """The status of the batch's carrier run and of the run its item made, if any."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as db:
        rows = db.execute(
            "SELECT CASE WHEN queue = %s THEN 'carrier' ELSE 'item' END, status"
            " FROM fairlane.runs WHERE batch_id = %s OR (queue = %s AND payload->>'batch_id' = %s)",
            (BATCH_QUEUE, batch_id, BATCH_QUEUE, str(batch_id)),
        ).fetchall()
    return dict(rows)


@pytest.mark.usefixtures("slow_wal_writer")
async def test_a_batch_items_run_survives_a_crash_before_its_carrier_completes(
    chaos_dsn: str, cluster: Cluster
) -> None:
    """The worker serves no queue but the carriers' and polls instead of listening, so no claim
    of the item's run (a durable commit) flushes the carrier's commit before the crash. With
    that commit at synchronous_commit off, as it was, the item's run is gone after the crash
    while the carrier is still EXECUTING under its lease, and would be completed."""
    async with AsyncBatchClient(chaos_dsn) as batches:
        batch = await batches.create("env", 1)
        await batches.ingest(batch.id, chunked(ndjson([{"task": "echo", "payload": 7}]), 64))
    worker = Worker(
        echo_tasks(),
        chaos_dsn,
        lease_seconds=30,
        poll_interval=0.1,
        run_periodic_jobs=False,
        connect_timeout=2,
        statement_timeout=5,
        shutdown_grace=1,
        queues=["unserved"],
        listen=False,
    )
    decided = anyio.Event()
    release = anyio.Event()
    process = worker.batch_items.process

    async def process_then_hold(ctx: RunContext, payload: Any) -> dict[str, Any]:
        # The item's run is committed; the carrier's completion waits until after the crash.
        result = await process(ctx, payload)
        decided.set()
        await release.wait()
        return result

    worker.batch_items.process = process_then_hold  # type: ignore[method-assign]
    async with running(worker):
        await decided.wait()
        await anyio.to_thread.run_sync(cluster.restart, "immediate")
        after_crash = await anyio.to_thread.run_sync(carrier_and_item, chaos_dsn, batch.id)
        assert after_crash == {"carrier": "EXECUTING", "item": "QUEUED"}, after_crash
        release.set()
        await wait_until(
            lambda: carrier_and_item(chaos_dsn, batch.id)["carrier"] == "COMPLETED",
            within=30,
            what="the carrier to complete",
        )
    with psycopg.connect(chaos_dsn) as db:
        assert batch_row(db, batch.id)["run_count"] == 1
