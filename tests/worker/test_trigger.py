"""Triggering runs through every kind of connection fairlane accepts, and what it refuses.

Each transactional path is checked both ways: a rolled-back trigger leaves no run behind, a
committed one is QUEUED and a lease store can claim it. Refused triggers (bad payloads, bad
options) must fail before any statement is sent, so the caller's transaction stays usable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, create_engine, pool
from sqlalchemy.orm import Session

import fairlane
from fairlane import (
    AsyncClient,
    Client,
    RunContext,
    RunStatus,
    TaskRegistry,
    TriggerRequest,
    Worker,
    limits,
)
from fairlane.config import sqlalchemy_url
from fairlane.errors import PayloadError, TriggerOptionError
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import run_status, running, statuses, wait_until

PAYLOAD = {"order": 17, "lines": ["a", "b"], "note": "ünïcode ✓"}


@pytest.fixture
def engine(dsn: str) -> Iterator[Engine]:
    engine = create_engine(sqlalchemy_url(dsn), poolclass=pool.NullPool)
    yield engine
    engine.dispose()


@pytest.fixture
async def async_engine(dsn: str) -> AsyncIterator[Any]:
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio extension needs greenlet")
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(sqlalchemy_url(dsn), poolclass=pool.NullPool)
    yield engine
    await engine.dispose()


def run_count(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert row is not None
    return int(row[0])


async def claim_ids(dsn: str, limit: int = 100) -> list[int]:
    """Claim through the worker's own fenced statement, on a separate connection."""
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="test-claimer")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        claimed = await store.claim(conn, limit)
    for run in claimed:
        assert run.lease_token is not None
        assert run.attempt == 1
    return sorted(run.id for run in claimed)


async def assert_queued_and_claimable(dsn: str, db: psycopg.Connection[Any], run_id: int) -> None:
    row = db.execute("SELECT status, task, payload FROM fairlane.runs WHERE id = %s", (run_id,))
    assert row.fetchone() == ("QUEUED", "send", PAYLOAD)
    assert await claim_ids(dsn) == [run_id]
    assert run_status(db, run_id) is RunStatus.EXECUTING


# --- The client (commits on return) -------------------------------------------------------


@pytest.mark.anyio
async def test_async_client_trigger_is_committed_and_claimable(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("send", PAYLOAD)
        run = await client.get_run(run_id)
    assert run.status is RunStatus.QUEUED
    assert run.payload == PAYLOAD
    assert run.attempts == 0
    await assert_queued_and_claimable(dsn, db, run_id)


@pytest.mark.anyio
async def test_sync_client_trigger_is_committed_and_claimable(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    with Client(dsn) as client:
        run_id = client.trigger("send", PAYLOAD, priority=5, tags=["x"])
        run = client.get_run(run_id)
    assert (run.status, run.priority, run.tags) == (RunStatus.QUEUED, 5, ["x"])
    await assert_queued_and_claimable(dsn, db, run_id)


def test_runs_with_and_without_tags_in_one_bulk_trigger_keep_theirs(dsn: str) -> None:
    # Runs without tags skip the statement's subquery that reads a run's tags.
    requests = [
        TriggerRequest("send", PAYLOAD, tags=["a", "b"]),
        TriggerRequest("send", PAYLOAD),
        TriggerRequest("send", PAYLOAD, tags=[]),
    ]
    with Client(dsn) as client:
        run_ids = client.trigger_many(requests)
        tags = [client.get_run(run_id).tags for run_id in run_ids]
    assert tags == [["a", "b"], [], []]


@pytest.mark.anyio
async def test_client_triggered_run_is_executed_by_a_worker(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("send")
    async def send(ctx: RunContext, payload: dict[str, Any]) -> int:
        return int(payload["order"]) + 1

    with Client(dsn) as client:
        run_id = client.trigger("send", PAYLOAD)
        async with running(Worker(tasks, dsn, concurrency=2)):
            await wait_until(lambda: statuses(db).get("COMPLETED") == 1, what="completion")
        assert client.get_run(run_id).result == 18


# --- SQLAlchemy: Session and Connection ---------------------------------------------------


@pytest.mark.anyio
async def test_sqlalchemy_session(dsn: str, db: psycopg.Connection[Any], engine: Engine) -> None:
    with Session(engine) as session:
        fairlane.trigger(session, "send", PAYLOAD)
        assert run_count(db) == 0, "an uncommitted run is visible to other sessions"
        session.rollback()
    assert run_count(db) == 0

    with Session(engine) as session:
        run_id = fairlane.trigger(session, "send", PAYLOAD)
        session.commit()
    await assert_queued_and_claimable(dsn, db, run_id)


@pytest.mark.anyio
async def test_sqlalchemy_connection(dsn: str, db: psycopg.Connection[Any], engine: Engine) -> None:
    with engine.connect() as conn:
        fairlane.trigger(conn, "send", PAYLOAD)
        assert await claim_ids(dsn) == [], "an uncommitted run was claimable"
        conn.rollback()
    assert run_count(db) == 0

    with engine.begin() as conn:
        run_id = fairlane.trigger(conn, "send", PAYLOAD)
    await assert_queued_and_claimable(dsn, db, run_id)


@pytest.mark.anyio
async def test_sqlalchemy_async_session_and_connection(
    dsn: str, db: psycopg.Connection[Any], async_engine: Any
) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession

    async with AsyncSession(async_engine) as session:
        await fairlane.trigger_async(session, "send", PAYLOAD)
        await session.rollback()
    async with async_engine.connect() as conn:
        await fairlane.trigger_async(conn, "send", PAYLOAD)
        await conn.rollback()
    assert run_count(db) == 0

    async with AsyncSession(async_engine) as session:
        first = await fairlane.trigger_async(session, "send", PAYLOAD)
        await session.commit()
    async with async_engine.begin() as conn:
        second = await fairlane.trigger_async(conn, "send", PAYLOAD)
    assert statuses(db) == {"QUEUED": 2}
    assert await claim_ids(dsn) == [first, second]


# --- psycopg: Connection and AsyncConnection ----------------------------------------------


@pytest.mark.anyio
async def test_psycopg_connection(dsn: str, db: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn) as conn:
        fairlane.trigger(conn, "send", PAYLOAD)
        assert run_count(db) == 0
        conn.rollback()
        assert run_count(db) == 0

        run_id = fairlane.trigger(conn, "send", PAYLOAD)
        conn.commit()
    await assert_queued_and_claimable(dsn, db, run_id)


@pytest.mark.anyio
async def test_psycopg_async_connection(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await fairlane.trigger_async(conn, "send", PAYLOAD)
        assert await claim_ids(dsn) == []
        await conn.rollback()
        assert run_count(db) == 0

        run_id = await fairlane.trigger_async(conn, "send", PAYLOAD)
        await conn.commit()
    await assert_queued_and_claimable(dsn, db, run_id)


def test_unsupported_connection_is_refused(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(fairlane.FairlaneError, match="cannot trigger through"):
        fairlane.trigger(object(), "send", PAYLOAD)  # type: ignore[arg-type]
    assert run_count(db) == 0


# --- Bulk: one statement ------------------------------------------------------------------


def test_trigger_many_is_one_statement(db: psycopg.Connection[Any], dsn: str) -> None:
    """Rows written by one statement share their transaction (xmin) AND command id (cmin).

    A run triggered by an earlier statement of the same transaction shows that cmin tells
    statements apart; the thousand bulk rows must then all carry one, different, cmin.
    """
    requests = [TriggerRequest("bulk", {"i": i}, priority=i % 3) for i in range(1000)]
    with psycopg.connect(dsn) as conn:
        single = fairlane.trigger(conn, "single", None)
        ids = fairlane.trigger_many(conn, requests)
        conn.commit()

    groups = db.execute(
        "SELECT task, xmin::text, cmin::text, count(*) FROM fairlane.runs GROUP BY 1, 2, 3"
    ).fetchall()
    assert len(groups) == 2, groups
    by_task = {task: (xmin, cmin, count) for task, xmin, cmin, count in groups}
    assert by_task["single"][2] == 1
    assert by_task["bulk"][2] == 1000
    assert by_task["bulk"][0] == by_task["single"][0], "not one transaction"
    assert by_task["bulk"][1] != by_task["single"][1], "cmin does not tell statements apart"

    # Ids come back in request order.
    assert len(ids) == 1000
    assert single not in ids
    order = dict(
        db.execute("SELECT id, (payload->'i')::int FROM fairlane.runs WHERE task = 'bulk'")
    )
    assert [order[run_id] for run_id in ids] == list(range(1000))
    assert statuses(db) == {"QUEUED": 1001}


@pytest.mark.anyio
async def test_client_trigger_many_is_one_transaction(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    # The client's connection is in autocommit: one transaction means one statement.
    async with AsyncClient(dsn) as client:
        ids = await client.trigger_many([TriggerRequest("bulk", i) for i in range(1000)])
    row = db.execute("SELECT count(DISTINCT xmin::text), count(*) FROM fairlane.runs").fetchone()
    assert row == (1, 1000)
    payloads = dict(db.execute("SELECT id, payload FROM fairlane.runs"))
    assert [payloads[run_id] for run_id in ids] == list(range(1000))
    # The trigger made the environment at the default limit (100); all 1,000 may start.
    limits.set_environment(db, "default", concurrency_limit=None)
    assert len(await claim_ids(dsn, limit=1000)) == 1000


# --- Payloads -----------------------------------------------------------------------------

BAD_PAYLOADS = [
    pytest.param({"text": "before\x00after"}, id="nul-in-string"),
    pytest.param({"key\x00": 1}, id="nul-in-key"),
    pytest.param(["\\\x00"], id="backslash-then-nul"),
    pytest.param({"value": object()}, id="object"),
    pytest.param({1, 2}, id="set"),
    pytest.param(float("nan"), id="nan"),
    pytest.param({"x": float("inf")}, id="infinity"),
    pytest.param({"text": "lone \ud800 surrogate"}, id="lone-surrogate"),
]


@pytest.mark.parametrize("bad", BAD_PAYLOADS)
def test_bad_payload_is_refused_before_anything_is_sent(
    dsn: str, db: psycopg.Connection[Any], bad: Any
) -> None:
    with psycopg.connect(dsn) as conn:
        good = fairlane.trigger(conn, "send", PAYLOAD)
        with pytest.raises(PayloadError) as refused:
            fairlane.trigger(conn, "send", bad)
        assert refused.value.index == 0
        # Nothing reached the server, so the caller's transaction is not aborted.
        assert conn.info.transaction_status is TransactionStatus.INTRANS
        conn.commit()
    assert db.execute("SELECT id FROM fairlane.runs").fetchall() == [(good,)]


@pytest.mark.parametrize("bad", BAD_PAYLOADS)
@pytest.mark.anyio
async def test_bulk_with_one_bad_item_writes_nothing(
    dsn: str, db: psycopg.Connection[Any], bad: Any
) -> None:
    requests = [TriggerRequest("send", {"i": i}) for i in range(10)]
    requests[5] = TriggerRequest("send", bad)
    async with AsyncClient(dsn) as client:
        with pytest.raises(PayloadError) as refused:
            await client.trigger_many(requests)
        assert refused.value.index == 5
        with Client(dsn) as sync_client, pytest.raises(PayloadError) as refused_sync:
            sync_client.trigger_many(requests)
        assert refused_sync.value.index == 5
    assert run_count(db) == 0


@pytest.mark.parametrize(
    "where",
    [
        pytest.param({"metadata": {"k": "\x00"}}, id="metadata"),
        pytest.param({"tags": ["ok", "not\x00ok"]}, id="tags"),
    ],
)
def test_bad_metadata_or_tags_report_their_item(
    dsn: str, db: psycopg.Connection[Any], where: dict[str, Any]
) -> None:
    requests = [TriggerRequest("send", i) for i in range(4)]
    requests[3] = TriggerRequest("send", 3, **where)
    with psycopg.connect(dsn) as conn, pytest.raises(PayloadError) as refused:
        fairlane.trigger_many(conn, requests)
    assert refused.value.index == 3
    assert run_count(db) == 0


@pytest.mark.anyio
async def test_escaped_backslash_u0000_is_accepted_and_round_trips(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    # Literal backslashes followed by "u0000": text, not a NUL character.
    payload = {"s": "\\u0000", "k\\u0000": ["\\\\u0000", "a\\u0000b"], "t": "\\\\\\u0000"}
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("send", payload, metadata={"m": "\\u0000"})
        run = await client.get_run(run_id)
    assert run.payload == payload
    assert run.metadata == {"m": "\\u0000"}
    row = db.execute("SELECT payload->>'s' FROM fairlane.runs WHERE id = %s", (run_id,))
    assert row.fetchone() == ("\\u0000",)


# --- Delay and options --------------------------------------------------------------------


@pytest.mark.parametrize("delay", [60, 60.0, timedelta(minutes=1)])
@pytest.mark.anyio
async def test_delayed_run_waits_for_its_time(
    dsn: str, db: psycopg.Connection[Any], delay: float | timedelta
) -> None:
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("send", PAYLOAD, delay=delay)
        run = await client.get_run(run_id)
    assert run.status is RunStatus.DELAYED
    row = db.execute(
        "SELECT available_at - now() FROM fairlane.runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    assert timedelta(seconds=55) < row[0] <= timedelta(seconds=60)
    assert await claim_ids(dsn) == [], "a delayed run was claimable before its time"

    # Once due, the periodic promotion makes it QUEUED and claimable.
    db.execute("UPDATE fairlane.runs SET available_at = now() - interval '1 second'")
    db.execute("SELECT fairlane.promote_delayed_runs()")
    assert run_status(db, run_id) is RunStatus.QUEUED
    assert await claim_ids(dsn) == [run_id]


def test_zero_delay_is_queued_at_once(db: psycopg.Connection[Any], dsn: str) -> None:
    with Client(dsn) as client:
        run = client.get_run(client.trigger("send", None, delay=0))
    assert (run.status, run.available_at) == (RunStatus.QUEUED, None)


BAD_OPTIONS = [
    pytest.param("send", {"max_attempts": 0}, "max_attempts", id="max_attempts=0"),
    pytest.param("send", {"max_attempts": 251}, "max_attempts", id="max_attempts=251"),
    pytest.param("send", {"max_attempts": 2.5}, "max_attempts", id="max_attempts=2.5"),
    pytest.param("", {}, "task", id="empty-task"),
    pytest.param("send", {"queue": ""}, "queue", id="empty-queue"),
    pytest.param("send", {"environment": ""}, "environment", id="empty-environment"),
    pytest.param("send", {"priority": 2**31}, "priority", id="priority-too-big"),
    pytest.param("send", {"delay": -1}, "delay", id="negative-delay"),
    pytest.param("send", {"delay": float("nan")}, "delay", id="nan-delay"),
    pytest.param("send", {"delay": float("inf")}, "delay", id="infinite-delay"),
    pytest.param("send", {"delay": 1e300}, "delay", id="huge-delay"),
    pytest.param("send", {"max_duration": float("inf")}, "max_duration", id="inf-duration"),
    pytest.param("send", {"tags": "one-string"}, "tags", id="tags-as-string"),
    pytest.param("se\x00nd", {}, "task", id="nul-in-task"),
    pytest.param("send", {"queue": "q\x00"}, "queue", id="nul-in-queue"),
    pytest.param("send", {"machine": "m\x00"}, "machine", id="nul-in-machine"),
    pytest.param("send\ud800", {}, "task", id="surrogate-in-task"),
]


@pytest.mark.parametrize(("task", "options", "option"), BAD_OPTIONS)
def test_bad_options_are_refused_before_anything_is_sent(
    dsn: str, db: psycopg.Connection[Any], task: str, options: dict[str, Any], option: str
) -> None:
    with psycopg.connect(dsn) as conn:
        good = fairlane.trigger(conn, "send", PAYLOAD)
        with pytest.raises(TriggerOptionError) as refused:
            fairlane.trigger(conn, task, PAYLOAD, **options)
        assert refused.value.option == option
        assert conn.info.transaction_status is TransactionStatus.INTRANS
        conn.commit()
    with Client(dsn) as client, pytest.raises(TriggerOptionError):
        client.trigger(task, PAYLOAD, **options)
    assert db.execute("SELECT id FROM fairlane.runs").fetchall() == [(good,)]
