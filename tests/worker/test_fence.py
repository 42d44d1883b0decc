"""The lease fence: a slow run is not executed twice, and a worker that lost its lease can
never overwrite the run's new owner. Everything runs against the real database."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry
from fairlane.worker.lease_store import Completion, Failure, Lease, LeaseStore
from fairlane.worker.outcomes import OutcomeWriter
from fairlane.worker.stats import WorkerStats
from tests.helpers import (
    fast_worker,
    run_row,
    run_status,
    running,
    speed_up_periodic_jobs,
    wait_until,
    worker_in_thread,
)

pytestmark = pytest.mark.anyio

SCHEMA = "fairlane"


@pytest.fixture
async def conn(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        yield connection


async def trigger(dsn: str, task: str, payload: Any = None, **options: Any) -> int:
    async with AsyncClient(dsn) as client:
        return await client.trigger(task, payload, **options)


# -- a) the seed scenario --------------------------------------------------------------------


async def test_handler_slower_than_the_lease_runs_exactly_once(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Visibility timeout 1 s, two workers, a 9 s handler: heartbeats keep the lease, so the
    run is never reclaimed or handed to the other worker."""
    speed_up_periodic_jobs(db, 0.2)
    tasks = TaskRegistry()
    starts: list[tuple[str, int]] = []

    @tasks.task("slow")
    async def slow(ctx: RunContext, payload: None) -> str:
        starts.append((ctx.worker_id, ctx.attempt))
        await anyio.sleep(9)
        return "done"

    workers = [fast_worker(tasks, dsn, lease_seconds=1.0) for _ in range(2)]
    run_id = await trigger(dsn, "slow")
    async with running(*workers):
        await wait_until(lambda: bool(starts), within=5, what="the handler to start")
        await wait_until(
            lambda: run_status(db, run_id) is RunStatus.COMPLETED, within=20, what="completion"
        )
    row = run_row(db, run_id)
    assert len(starts) == 1, starts
    assert row["attempts"] == 1
    assert row["result"] == "done"
    assert row["error"] is None
    assert row["lease_token"] is None
    for worker in workers:
        assert worker.stats.lost_leases == 0
        assert worker.stats.stale_writes == 0
    assert sum(worker.stats.heartbeats for worker in workers) >= 9


# -- b) a stalled worker loses its lease -------------------------------------------------------


@pytest.mark.parametrize("outcome", ["complete", "fail"])
async def test_stalled_worker_cannot_overwrite_the_new_owner(
    dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture, outcome: str
) -> None:
    """Worker 1's event loop is blocked on attempt 1 (no heartbeats), its lease lapses, the run
    is reclaimed and completed by worker 2. When worker 1 wakes up its complete (or fail) is
    refused by the fence, logged and counted; the stored outcome stays worker 2's."""
    caplog.set_level(logging.WARNING, logger="fairlane.worker")
    speed_up_periodic_jobs(db, 0.2)
    unblock = threading.Event()
    starts: list[tuple[str, int]] = []

    stale_tasks = TaskRegistry()

    @stale_tasks.task("job")
    async def stalls(ctx: RunContext, payload: None) -> str:
        starts.append(("w1", ctx.attempt))
        if ctx.attempt == 1:
            # Blocks worker 1's whole event loop: its heartbeats and periodic jobs stop too.
            unblock.wait(timeout=30)
            if outcome == "fail":
                raise RuntimeError("stale failure from worker 1")
        return "from worker 1"

    fresh_tasks = TaskRegistry()

    @fresh_tasks.task("job")
    async def completes(ctx: RunContext, payload: None) -> str:
        starts.append(("w2", ctx.attempt))
        return "from worker 2"

    stale = fast_worker(stale_tasks, dsn, lease_seconds=0.5, worker_id="stale")
    fresh = fast_worker(fresh_tasks, dsn, lease_seconds=5.0, worker_id="fresh")
    run_id = await trigger(dsn, "job")
    try:
        async with worker_in_thread(stale):
            await wait_until(lambda: starts == [("w1", 1)], within=5, what="worker 1 to start")
            async with running(fresh):
                await wait_until(
                    lambda: run_status(db, run_id) is RunStatus.COMPLETED,
                    within=10,
                    what="worker 2 to reclaim and complete the run",
                )
            completed = run_row(db, run_id)
            unblock.set()
            await wait_until(
                lambda: stale.stats.stale_writes >= 1, within=10, what="the stale write"
            )
    finally:
        unblock.set()

    assert starts == [("w1", 1), ("w2", 2)]
    row = run_row(db, run_id)
    assert row == completed, "the stale worker's write changed the row"
    assert row["status"] == RunStatus.COMPLETED
    assert row["result"] == "from worker 2"
    assert row["attempts"] == 2
    assert row["lease_token"] is None
    assert "stale failure" not in str(row["error"])
    assert stale.stats.completed == 0
    assert stale.stats.retried == 0
    assert stale.stats.failed == 0
    assert fresh.stats.completed == 1
    refusals = [
        record
        for record in caplog.records
        if record.name == "fairlane.worker" and f"fence refused {outcome}" in record.getMessage()
    ]
    assert refusals, [record.getMessage() for record in caplog.records]


async def test_worker_without_heartbeats_stops_its_handler(
    dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """With its heartbeats paused, a worker notices its lease deadline pass, cancels the
    handler (which is told why) and discards the attempt; another worker then gets the run."""
    caplog.set_level(logging.WARNING, logger="fairlane.worker")
    speed_up_periodic_jobs(db, 0.1)
    seen: list[RunContext] = []
    cancelled = threading.Event()
    tasks = TaskRegistry()

    @tasks.task("job")
    async def job(ctx: RunContext, payload: None) -> str:
        seen.append(ctx)
        if ctx.worker_id == "stale":
            try:
                await anyio.sleep(30)
            except anyio.get_cancelled_exc_class():
                cancelled.set()
                raise
        return f"attempt {ctx.attempt} by {ctx.worker_id}"

    # No periodic jobs while the stale worker runs alone: nobody reclaims the run in the
    # database, so only the worker's own lease deadline can stop the handler.
    stale = fast_worker(tasks, dsn, lease_seconds=0.5, worker_id="stale", run_periodic_jobs=False)
    stale.heartbeater.paused = True
    run_id = await trigger(dsn, "job")
    async with running(stale):
        await wait_until(cancelled.is_set, within=5, what="the handler to be cancelled")
    assert len(seen) == 1
    assert seen[0].lease_lost
    assert seen[0].stop_requested.is_set()
    assert stale.stats.lost_leases == 1
    assert stale.stats.completed == stale.stats.failed == stale.stats.retried == 0
    assert stale.stats.released == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "fairlane.worker"]
    assert any(f"run {run_id}: lease lost" in message for message in messages), messages
    assert run_row(db, run_id)["status"] == RunStatus.EXECUTING, "the attempt was discarded"

    fresh = fast_worker(tasks, dsn, lease_seconds=5.0, worker_id="fresh")
    async with running(fresh):
        await wait_until(
            lambda: run_status(db, run_id) is RunStatus.COMPLETED, within=10, what="completion"
        )
    row = run_row(db, run_id)
    assert row["attempts"] == 2
    assert row["result"] == "attempt 2 by fresh"


async def test_worker_that_reclaims_its_own_lost_run_keeps_the_new_lease(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The database can take a lease back before the holder notices (its deadline is measured
    from before the claim; the worker checks only once per heartbeat interval). When the same
    worker then claims the run again, the stale attempt must be stopped, and the new attempt
    must keep being heartbeated even when the stale one ends afterwards."""
    attempts: list[RunContext] = []
    stale_cancelled = threading.Event()
    tasks = TaskRegistry()

    @tasks.task("job")
    async def job(ctx: RunContext, payload: None) -> str:
        attempts.append(ctx)
        if ctx.attempt == 1:
            try:
                await anyio.sleep(30)
            except anyio.get_cancelled_exc_class():
                stale_cancelled.set()
                raise
        await anyio.sleep(2.5)  # longer than two leases: only heartbeats keep it
        return f"attempt {ctx.attempt}"

    # Periodic jobs are held back until the re-claim, then run fast to take back any lease that
    # is not kept.
    db.execute("UPDATE fairlane.periodic_jobs SET next_due_at = now() + interval '1 hour'")
    worker = fast_worker(tasks, dsn, lease_seconds=1.0)
    run_id = await trigger(dsn, "job")
    async with running(worker):
        await wait_until(lambda: len(attempts) == 1, within=5, what="attempt 1")
        # The lease lapses in the database and is reclaimed there, at once.
        db.execute(
            "UPDATE fairlane.runs SET lease_until = now() - interval '1 second' WHERE id = %s",
            (run_id,),
        )
        db.execute("SELECT fairlane.reclaim_expired_leases()")
        await wait_until(lambda: len(attempts) == 2, within=5, what="the re-claim")
        await wait_until(stale_cancelled.is_set, within=5, what="attempt 1 to be stopped")
        speed_up_periodic_jobs(db, 0.1)
        await wait_until(
            lambda: run_status(db, run_id) is RunStatus.COMPLETED, within=10, what="completion"
        )
    assert attempts[0].lease_lost
    assert not attempts[1].stop_requested.is_set()
    assert [ctx.attempt for ctx in attempts] == [1, 2]
    row = run_row(db, run_id)
    assert row["attempts"] == 2
    assert row["result"] == "attempt 2"
    assert worker.stats.lost_leases == 1
    assert worker.stats.completed == 1


# -- c) the fence, driven statement by statement -----------------------------------------------


async def test_heartbeat_and_writes_of_a_lost_lease_after_reclaim_and_reclaim(
    dsn: str, db: psycopg.Connection[Any], conn: psycopg.AsyncConnection[Any]
) -> None:
    run_id = await trigger(dsn, "job", {"n": 1})
    store_a = LeaseStore(SCHEMA, lease_seconds=0.2, worker_id="A")
    store_b = LeaseStore(SCHEMA, lease_seconds=30, worker_id="B")

    [claim_a] = await store_a.claim(conn, 10)
    assert claim_a.id == run_id
    lease_a = Lease(run_id, claim_a.lease_token)
    assert await store_a.heartbeat(conn, [lease_a]) == set(), "a live lease is kept"

    await wait_until(
        lambda: bool(
            db.execute(
                "SELECT lease_until < now() FROM fairlane.runs WHERE id = %s", (run_id,)
            ).fetchone()[0]  # type: ignore[index]
        ),
        within=5,
        what="the lease to lapse",
    )
    summary = db.execute("SELECT fairlane.reclaim_expired_leases()").fetchone()
    assert summary is not None
    assert summary[0]["requeued"] == 1
    assert run_row(db, run_id)["lease_token"] is None
    # Lost already: reclaimed, not yet re-claimed.
    assert await store_a.heartbeat(conn, [lease_a]) == {run_id}

    [claim_b] = await store_b.claim(conn, 10)
    assert claim_b.id == run_id
    assert claim_b.lease_token != claim_a.lease_token
    assert claim_b.attempt == 2
    before = run_row(db, run_id)

    # Still lost after someone else re-claimed: the token is B's, not A's.
    assert await store_a.heartbeat(conn, [lease_a]) == {run_id}
    assert run_row(db, run_id) == before
    assert before["lease_token"] == claim_b.lease_token
    assert before["worker_id"] == "B"

    assert await store_a.complete(conn, [Completion(lease_a, '"stale result"')]) == set()
    assert run_row(db, run_id) == before
    failure = Failure(lease_a, '{"message": "stale"}', "FAILED", None)
    assert await store_a.fail(conn, [failure]) == set()
    assert run_row(db, run_id) == before
    retry = Failure(lease_a, '{"message": "stale"}', "DELAYED", 0.0)
    assert await store_a.fail(conn, [retry]) == set()
    assert run_row(db, run_id) == before
    assert await store_a.release(conn, [lease_a]) == set()
    assert run_row(db, run_id) == before

    # The owner's writes still go through.
    lease_b = Lease(run_id, claim_b.lease_token)
    assert await store_b.heartbeat(conn, [lease_b]) == set()
    assert await store_b.complete(conn, [Completion(lease_b, '"fresh result"')]) == {run_id}
    row = run_row(db, run_id)
    assert row["status"] == RunStatus.COMPLETED
    assert row["result"] == "fresh result"
    assert row["attempts"] == 2

    # A finished run fences everyone, its last owner included.
    assert await store_b.heartbeat(conn, [lease_b]) == {run_id}
    assert await store_b.complete(conn, [Completion(lease_b, '"again"')]) == set()
    assert await store_b.release(conn, [lease_b]) == set()
    assert run_row(db, run_id) == row


async def test_every_write_matches_id_and_token(
    dsn: str, db: psycopg.Connection[Any], conn: psycopg.AsyncConnection[Any]
) -> None:
    first = await trigger(dsn, "job", 1)
    second = await trigger(dsn, "job", 2)
    store = LeaseStore(SCHEMA, lease_seconds=30, worker_id="W")
    claims = {claim.id: claim for claim in await store.claim(conn, 10)}
    assert set(claims) == {first, second}
    before = run_row(db, first)

    wrong_token = Lease(first, uuid.uuid4())
    # The right token, but of another run.
    crossed = Lease(first, claims[second].lease_token)
    for lease in (wrong_token, crossed):
        assert await store.heartbeat(conn, [lease]) == {first}
        assert await store.complete(conn, [Completion(lease, '"forged"')]) == set()
        assert await store.fail(conn, [Failure(lease, '{"m": 1}', "FAILED", None)]) == set()
        assert await store.release(conn, [lease]) == set()
        assert run_row(db, first) == before

    # A batch mixing a good and a forged lease writes only the good one.
    good = Lease(first, claims[first].lease_token)
    accepted = await store.complete(
        conn, [Completion(good, '"ok"'), Completion(Lease(second, uuid.uuid4()), '"forged"')]
    )
    assert accepted == {first}
    assert run_row(db, first)["result"] == "ok"
    assert run_row(db, second)["status"] == RunStatus.EXECUTING
    assert run_row(db, second)["result"] is None


async def test_outcome_whose_write_failed_is_written_by_the_next_flush(
    dsn: str, db: psycopg.Connection[Any], conn: psycopg.AsyncConnection[Any]
) -> None:
    """A completion must not be dropped when its write fails (the connection died): the worker
    would otherwise keep heartbeating a run whose handler is done, forever."""
    run_id = await trigger(dsn, "job")
    store = LeaseStore(SCHEMA, lease_seconds=30, worker_id="W")
    [claimed] = await store.claim(conn, 1)
    lease = Lease(run_id, claimed.lease_token)
    done: list[Sequence[Lease]] = []
    stats = WorkerStats()
    writer = OutcomeWriter(store, stats, done.append)
    writer.complete(Completion(lease, '"done"'))

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as doomed:
        db.execute("SELECT pg_terminate_backend(%s)", (doomed.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            await writer.flush(doomed)
    assert writer.has_pending
    assert done == []
    assert run_status(db, run_id) is RunStatus.EXECUTING

    await writer.flush(conn)
    assert not writer.has_pending
    assert [list(leases) for leases in done] == [[lease]]
    assert stats.completed == 1
    assert stats.stale_writes == 0
    row = run_row(db, run_id)
    assert row["status"] == RunStatus.COMPLETED
    assert row["result"] == "done"
