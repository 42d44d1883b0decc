"""Size bounds (sql/triggering/sizes.sql): a trigger that fits under its queue's bound counts
nothing, and the bound stays an upper bound of the runs waiting, whatever comes back to wait.

Where a test must show that a trigger did not count, it inserts QUEUED runs behind the
triggers' back (no trigger path does): a trigger that counted would see them, one that trusted
its bound does not."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, TriggerRequest, limits
from fairlane.engine import engine
from fairlane.errors import QueueSizeLimitExceeded
from tests.helpers.interleave import sessions
from tests.helpers.trigger_steps import made, settings_rows, start_many

pytestmark = pytest.mark.anyio


def bound(db: psycopg.Connection[Any], environment: str, scope: str, queue: str = "") -> int | None:
    row = db.execute(
        "SELECT bound FROM fairlane.size_bounds"
        " WHERE environment = %s AND scope = %s AND queue = %s",
        (environment, scope, queue),
    ).fetchone()
    return None if row is None else int(row[0])


def unseen_runs(db: psycopg.Connection[Any], environment: str, queue: str, n: int) -> None:
    """``n`` QUEUED runs that no trigger admitted, so no bound counts them."""
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
        " SELECT %s, %s, 'unseen', 'null', 'QUEUED' FROM generate_series(1, %s)",
        (environment, queue, n),
    )


def set_status(db: psycopg.Connection[Any], task: str, status: str) -> None:
    db.execute("UPDATE fairlane.runs SET status = %s WHERE task = %s", (status, task))


async def test_a_trigger_that_fits_under_the_bound_counts_nothing(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "default", "q", size_limit=10)
    async with AsyncClient(dsn) as client:
        await client.trigger("t", queue="q")
        # Counted (no bound yet): nothing waiting, nothing held, and the run just admitted.
        assert bound(db, "default", "queue", "q") == 1
        unseen_runs(db, "default", "q", 20)
        await client.trigger("t", queue="q")
        await client.trigger_many([TriggerRequest("t", queue="q") for _ in range(8)])
        assert bound(db, "default", "queue", "q") == 10
        # 11 would pass the limit under the bound: this one counts, and sees the unseen runs
        # (a count stops at limit + 1).
        with pytest.raises(QueueSizeLimitExceeded) as refused:
            await client.trigger("t", queue="q")
    assert refused.value.size == 11
    assert bound(db, "default", "queue", "q") == 10, "a refused trigger adds nothing"


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
async def test_runs_held_when_counted_are_in_the_bound(
    dsn: str, db: psycopg.Connection[Any], keyed: bool
) -> None:
    """A run that was EXECUTING when the queue was counted can come back to wait (a retry, a
    lapsed lease) without a trigger: the bound must hold a place for it, or a later trigger
    that fits under the bound would pass the limit."""
    key = iter(range(100))

    def request(task: str) -> TriggerRequest:
        return TriggerRequest(task, queue="q", idempotency_key=f"k{next(key)}" if keyed else None)

    async with AsyncClient(dsn) as client:
        await client.trigger_many([request("held")])
        set_status(db, "held", "EXECUTING")
        limits.set_queue(db, "default", "q", size_limit=5)
        await client.trigger_many([request("t")])
        # Counted: nothing waiting but the held run's place, plus the run admitted.
        assert bound(db, "default", "queue", "q") == 2
        set_status(db, "held", "DELAYED")  # a retry's backoff: waiting again
        assert len(await client.trigger_many([request("t") for _ in range(3)])) == 3
        with pytest.raises(QueueSizeLimitExceeded) as refused:
            await client.trigger_many([request("t")])
    assert refused.value.size == 5


async def test_a_bound_is_kept_only_where_the_runs_held_fit(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        await client.trigger_many([TriggerRequest("held", queue="q") for _ in range(4)])
        set_status(db, "held", "WAITING")
        limits.set_queue(db, "default", "q", size_limit=3)
        await client.trigger("t", queue="q")
        # 4 held and 1 waiting do not fit under 3: no bound, the next trigger counts again.
        assert bound(db, "default", "queue", "q") is None
        unseen_runs(db, "default", "q", 1)
        with pytest.raises(QueueSizeLimitExceeded) as refused:
            await client.trigger_many([TriggerRequest("t", queue="q") for _ in range(2)])
    assert refused.value.size == 2


@pytest.mark.parametrize("scope", ["queue", "environment"])
async def test_a_limit_set_again_counts_the_runs_admitted_without_one(
    dsn: str, db: psycopg.Connection[Any], scope: str
) -> None:
    def set_limit(size_limit: int | None) -> None:
        if scope == "queue":
            limits.set_queue(db, "acme", "q", size_limit=size_limit)
        else:
            limits.set_environment(db, "acme", size_limit=size_limit)

    async with AsyncClient(dsn) as client:
        set_limit(3)
        await client.trigger("t", environment="acme", queue="q")
        assert bound(db, "acme", scope, "q" if scope == "queue" else "") == 1
        set_limit(None)
        await client.trigger_many(
            [TriggerRequest("t", environment="acme", queue="q") for _ in range(5)]
        )
        set_limit(3)
        assert bound(db, "acme", scope, "q" if scope == "queue" else "") is None
        # Under the old bound (1) this one would fit; counted, the 6 waiting do not.
        with pytest.raises(QueueSizeLimitExceeded) as refused:
            await client.trigger("t", environment="acme", queue="q")
    assert (refused.value.scope, refused.value.size) == (scope, 4)


async def test_an_environment_bound_counts_the_runs_of_all_its_queues(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_environment(db, "acme", size_limit=4)
    async with AsyncClient(dsn) as client:
        await client.trigger("t", environment="acme", queue="a")
        unseen_runs(db, "acme", "b", 5)
        await client.trigger_many(
            [TriggerRequest("t", environment="acme", queue=q) for q in ("b", "c", "d")]
        )
        assert bound(db, "acme", "environment") == 4
        with pytest.raises(QueueSizeLimitExceeded) as refused:
            await client.trigger("t", environment="acme", queue="e")
    # Counted: 4 admitted and 5 unseen, the count stopping at limit + 1.
    assert (refused.value.scope, refused.value.size) == ("environment", 5)


async def test_a_keyed_call_adds_the_runs_it_made_not_its_requests(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "default", "q", size_limit=10)
    async with AsyncClient(dsn) as client:
        first = await client.trigger("t", queue="q", idempotency_key="a")
        assert bound(db, "default", "queue", "q") == 1
        again = await client.trigger_many(
            [
                TriggerRequest("t", queue="q", idempotency_key="a"),
                TriggerRequest("t", queue="q", idempotency_key="b"),
            ]
        )
        assert again[0] == first
        assert bound(db, "default", "queue", "q") == 2
        # A call that makes nothing leaves the bound as it was.
        assert await client.trigger("t", queue="q", idempotency_key="b") == again[1]
    assert bound(db, "default", "queue", "q") == 2


def test_an_environment_limit_change_waits_for_the_triggers_holding_its_size_lock(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A trigger holds the environment's size lock to the end of its transaction, and writes
    the bound at its end. A limit removed without waiting for it could be set again, deleting
    the bounds, before that trigger writes its own, which would then miss every run admitted
    while there was no limit. The change waits; setting the limit again deletes the bound."""
    limits.set_environment(db, "acme", size_limit=5)
    settings_rows(db, "acme", "q")
    change = engine("fairlane").limits.upsert_environment(
        "acme",
        concurrency_limit=None,
        set_limit=False,
        burst_factor=None,
        paused=None,
        size_limit=None,
        set_size_limit=True,
    )
    with sessions(dsn, 2) as (a, b):
        a.begin()
        made(start_many(a, [TriggerRequest("t", environment="acme", queue="q")]).result())
        removing = b.start(change.sql, dict(change.params or {}))
        b.blocked()
        a.commit()
        removing.result()
    limits.set_environment(db, "acme", size_limit=5)
    assert bound(db, "acme", "environment") is None
