"""Hard queue size limits (point 4): per queue and per environment, unlimited by default,
checked in the trigger's transaction so that concurrent triggers cannot overshoot; bulk
triggers are all or nothing."""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest
from psycopg.pq import TransactionStatus

import fairlane
from fairlane import AsyncClient, Debounce, TriggerRequest, limits
from fairlane.cli import build_parser
from fairlane.cli.limits import cmd_limits
from fairlane.errors import QueueSizeLimitExceeded
from tests.helpers import statuses
from tests.helpers.interleave import sessions
from tests.helpers.trigger_steps import settings_rows, start_many

pytestmark = pytest.mark.anyio


def waiting(db: psycopg.Connection[Any], queue: str | None = None) -> int:
    row = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE status IN ('QUEUED', 'DELAYED')"
        " AND (%(q)s::text IS NULL OR queue = %(q)s::text)",
        {"q": queue},
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_sixteen_connections_cannot_overshoot_a_limit_of_100(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "acme", "mail", size_limit=100)
    refused: list[QueueSizeLimitExceeded] = []
    made: list[int] = []
    go = anyio.Event()

    async def client_triggers_ten(client: AsyncClient) -> None:
        await go.wait()
        for n in range(10):
            try:
                made.append(await client.trigger("send", n, environment="acme", queue="mail"))
            except QueueSizeLimitExceeded as error:
                refused.append(error)

    clients = [AsyncClient(dsn) for _ in range(16)]
    try:
        for client in clients:  # connect first, so the triggers start together
            await client.list_runs(limit=1)
        async with anyio.create_task_group() as group:
            for client in clients:
                group.start_soon(client_triggers_ten, client)
            go.set()
    finally:
        for client in clients:
            await client.close()
    assert len(made) == 100
    assert len(refused) == 60
    assert statuses(db) == {"QUEUED": 100}
    error = refused[0]
    assert (error.environment, error.queue, error.limit, error.scope) == (
        "acme",
        "mail",
        100,
        "queue",
    )
    assert error.size == 100
    assert error.index == 0


async def test_delayed_runs_count_and_other_queues_do_not(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "default", "small", size_limit=3)
    async with AsyncClient(dsn) as client:
        await client.trigger("t", queue="small")
        await client.trigger("t", queue="small", delay="1h")
        await client.trigger("t", queue="small", debounce=Debounce("d", "1m"))
        with pytest.raises(QueueSizeLimitExceeded):
            await client.trigger("t", queue="small")
        with pytest.raises(QueueSizeLimitExceeded):
            await client.trigger("t", queue="small", delay="1m")
        # Debouncing onto the existing run adds nothing: it is allowed at the limit.
        await client.trigger("t", queue="small", debounce=Debounce("d", "1m"))
        await client.trigger("t", queue="big")
        # Runs that started or ended no longer count.
        db.execute(
            "UPDATE fairlane.runs SET status = 'EXECUTING' WHERE queue = 'small'"
            " AND status = 'QUEUED'"
        )
        await client.trigger("t", queue="small")
        # Raising the limit, or removing it, applies to the next trigger.
        limits.set_queue(db, "default", "small", size_limit=None)
        await client.trigger("t", queue="small")
    assert waiting(db, "small") == 4


async def test_environment_limit_spans_its_queues(dsn: str, db: psycopg.Connection[Any]) -> None:
    limits.set_environment(db, "tenant", size_limit=4)
    async with AsyncClient(dsn) as client:
        for queue in ("a", "b", "c", "d"):
            await client.trigger("t", environment="tenant", queue=queue)
        with pytest.raises(QueueSizeLimitExceeded) as refused:
            await client.trigger("t", environment="tenant", queue="e")
        await client.trigger("t", environment="elsewhere", queue="e")
    error = refused.value
    assert (error.environment, error.queue, error.limit, error.scope, error.size) == (
        "tenant",
        "e",
        4,
        "environment",
        4,
    )
    assert "environment 'tenant'" in str(error)


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
async def test_bulk_trigger_is_all_or_nothing(
    dsn: str, db: psycopg.Connection[Any], keyed: bool
) -> None:
    limits.set_queue(db, "default", "q", size_limit=5)
    async with AsyncClient(dsn) as client:
        await client.trigger("t", queue="q")
        await client.trigger("t", queue="q", debounce=Debounce("x", "1m"))

        def batch(n: int) -> list[TriggerRequest]:
            requests = [TriggerRequest("t", i, queue="other") for i in range(2)]
            requests += [
                TriggerRequest("t", i, queue="q", idempotency_key=f"k{i}" if keyed else None)
                for i in range(n)
            ]
            return requests

        with pytest.raises(QueueSizeLimitExceeded) as refused:
            await client.trigger_many(batch(4))
        # Room for 3: the request that did not fit is the 4th of queue q, item 5.
        assert refused.value.index == 5
        assert waiting(db) == 2, "nothing of the refused batch may be written"
        # The debounced run was not touched either, and 3 fit.
        assert len(await client.trigger_many(batch(3))) == 5
    assert waiting(db, "q") == 5


async def test_refusal_leaves_the_callers_transaction_usable(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "default", "default", size_limit=1)
    with psycopg.connect(dsn) as conn:
        first = fairlane.trigger(conn, "t")
        with pytest.raises(QueueSizeLimitExceeded):
            fairlane.trigger(conn, "t")
        with pytest.raises(QueueSizeLimitExceeded):
            fairlane.trigger(conn, "t", idempotency_key="k")
        assert conn.info.transaction_status is TransactionStatus.INTRANS
        conn.execute("SELECT 1")
        conn.commit()
    assert db.execute("SELECT id FROM fairlane.runs").fetchall() == [(first,)]


async def test_unlimited_by_default_and_in_the_limits_table(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    async with AsyncClient(dsn) as client:
        await client.trigger_many([TriggerRequest("t", i) for i in range(500)])
    assert waiting(db) == 500
    args = build_parser().parse_args(
        ["limits", "queue", "default", "default", "--size-limit", "600", "--dsn", dsn]
    )
    assert cmd_limits(args) == 0
    args = build_parser().parse_args(
        ["limits", "env", "default", "--size-limit", "1000", "--dsn", dsn]
    )
    assert cmd_limits(args) == 0
    out = capsys.readouterr().out
    assert "600/1000" in out
    settings = limits.set_queue(db, "default", "default")
    assert settings.size_limit == 600
    with pytest.raises(fairlane.errors.SettingError):
        limits.set_queue(db, "default", "default", size_limit=-1)


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
@pytest.mark.parametrize("scope", ["queue", "environment"])
def test_a_trigger_waits_for_the_limit_and_counts_the_holders_run(
    dsn: str, db: psycopg.Connection[Any], scope: str, keyed: bool
) -> None:
    """a takes the last place and holds its transaction open; b's trigger waits for a's
    size-limit lock, then counts a's committed run and is refused. Counting without the lock
    (or in the same statement as taking it) would let both in."""
    if scope == "queue":
        limits.set_queue(db, "acme", "mail", size_limit=1)
    else:
        limits.set_environment(db, "acme", size_limit=1)
    settings_rows(db, "acme", "mail")

    def request(n: int) -> TriggerRequest:
        key = f"k{n}" if keyed else None
        return TriggerRequest("send", n, environment="acme", queue="mail", idempotency_key=key)

    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        start_many(a, [request(1)]).result()
        second = start_many(b, [request(2)])
        b.blocked()
        a.commit()
        rows = second.result()
        b.commit()
    # One row: no run, the limit passed, and (keyed) the request that did not fit.
    assert [row[:8] for row in rows] == [(None, None, None, "acme", "mail", 1, scope, 1)]
    assert waiting(db) == 1
