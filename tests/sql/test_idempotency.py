"""Idempotency keys (point 2): scoped per environment and task, with scope run, attempt or
global and an expiry; failed runs free their key, canceled ones keep it; 20 concurrent
triggers with one key, on 20 real connections, make exactly one run; and each decision a
trigger makes from another's key, stepped statement by statement against it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import fairlane
from fairlane import AsyncClient, Client, RunStatus, TriggerRequest
from fairlane.triggering.idempotency import stored_key
from tests.helpers import trigger_together
from tests.helpers.interleave import sessions
from tests.helpers.trigger_steps import ids_of, settings_rows, start_many

pytestmark = pytest.mark.anyio


def run_ids(db: psycopg.Connection[Any]) -> list[int]:
    return [row[0] for row in db.execute("SELECT id FROM fairlane.runs ORDER BY id")]


async def test_second_trigger_with_the_key_returns_the_existing_run(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        first = await client.trigger("charge", {"cents": 100}, idempotency_key="order-17")
        again = await client.trigger("charge", {"cents": 999}, idempotency_key="order-17")
        run = await client.get_run(first)
    assert again == first
    assert run.payload == {"cents": 100}, "the second trigger must not change the run"
    assert run.idempotency_key == stored_key("order-17")
    assert run_ids(db) == [first]


async def test_keys_are_scoped_per_environment_and_task(dsn: str) -> None:
    async with AsyncClient(dsn) as client:
        runs = {
            await client.trigger("charge", idempotency_key="k"),
            await client.trigger("refund", idempotency_key="k"),
            await client.trigger("charge", idempotency_key="k", environment="other"),
            await client.trigger("charge", idempotency_key="k", queue="elsewhere"),
        }
    # A different queue is the same (environment, task): it finds the first run.
    assert len(runs) == 3


async def test_scopes(dsn: str) -> None:
    async with AsyncClient(dsn) as client:
        parent_a = await client.trigger("parent")
        parent_b = await client.trigger("parent")

        async def child(**options: Any) -> int:
            return await client.trigger("child", idempotency_key="step-1", **options)

        # run (the default): one child per parent.
        a1 = await child(parent_run_id=parent_a, parent_attempt=1)
        assert await child(parent_run_id=parent_a, parent_attempt=2) == a1
        b1 = await child(parent_run_id=parent_b, parent_attempt=1)
        assert b1 != a1
        # attempt: one child per parent attempt.
        attempt1 = await child(
            parent_run_id=parent_a, parent_attempt=1, idempotency_scope="attempt"
        )
        attempt2 = await child(
            parent_run_id=parent_a, parent_attempt=2, idempotency_scope="attempt"
        )
        assert len({attempt1, attempt2, a1}) == 3
        assert (
            await child(parent_run_id=parent_a, parent_attempt=2, idempotency_scope="attempt")
            == attempt2
        )
        # global: the parent does not matter; without a parent every scope is global.
        g = await child(parent_run_id=parent_a, idempotency_scope="global")
        assert await child(parent_run_id=parent_b, idempotency_scope="global") == g
        assert await child() == g
        assert await child(idempotency_scope="attempt") == g
        assert (await client.get_run(a1)).parent_run_id == parent_a


async def test_bad_scope_and_missing_attempt_are_refused(dsn: str) -> None:
    async with AsyncClient(dsn) as client:
        with pytest.raises(fairlane.errors.TriggerOptionError) as bad_scope:
            await client.trigger("t", idempotency_key="k", idempotency_scope="forever")
        assert bad_scope.value.option == "idempotency_scope"
        with pytest.raises(fairlane.errors.TriggerOptionError) as no_attempt:
            await client.trigger(
                "t", idempotency_key="k", idempotency_scope="attempt", parent_run_id=1
            )
        assert no_attempt.value.option == "parent_attempt"


async def test_expiry_default_and_explicit(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        default = await client.get_run(await client.trigger("t", idempotency_key="a"))
        short = await client.get_run(
            await client.trigger("t", idempotency_key="b", idempotency_ttl="1h")
        )
        assert default.idempotency_key_expires_at is not None
        assert short.idempotency_key_expires_at is not None
        ttl = default.idempotency_key_expires_at - default.created_at
        assert ttl.total_seconds() == 30 * 86_400
        assert (short.idempotency_key_expires_at - short.created_at).total_seconds() == 3600

        # An expired key is freed: the next trigger makes a new run, the old run keeps it as
        # its inactive key.
        db.execute(
            "UPDATE fairlane.runs SET idempotency_key_expires_at = now() - interval '1 second'"
            " WHERE id = %s",
            (short.id,),
        )
        fresh = await client.trigger("t", idempotency_key="b")
        assert fresh != short.id
        row = db.execute(
            "SELECT idempotency_key, inactive_idempotency_key FROM fairlane.runs WHERE id = %s",
            (short.id,),
        ).fetchone()
        assert row == (None, stored_key("b"))
        assert await client.trigger("t", idempotency_key="b") == fresh


@pytest.mark.parametrize("status", ["FAILED", "CRASHED", "TIMED_OUT", "EXPIRED", "SYSTEM_FAILURE"])
async def test_a_failed_run_frees_its_key(
    dsn: str, db: psycopg.Connection[Any], status: str
) -> None:
    async with AsyncClient(dsn) as client:
        first = await client.trigger("t", 1, idempotency_key="k")
        db.execute(
            "UPDATE fairlane.runs SET status = %s, finished_at = now() WHERE id = %s",
            (status, first),
        )
        second = await client.trigger("t", 2, idempotency_key="k")
        assert second != first
        assert (await client.get_run(second)).status is RunStatus.QUEUED
        assert await client.trigger("t", 3, idempotency_key="k") == second
        assert (await client.get_run(first)).idempotency_key is None


@pytest.mark.parametrize("status", ["CANCELED", "COMPLETED", "EXECUTING", "DELAYED"])
async def test_other_statuses_keep_the_key(
    dsn: str, db: psycopg.Connection[Any], status: str
) -> None:
    async with AsyncClient(dsn) as client:
        first = await client.trigger("t", idempotency_key="k")
        db.execute("UPDATE fairlane.runs SET status = %s WHERE id = %s", (status, first))
        assert await client.trigger("t", idempotency_key="k") == first


async def test_cancel_keeps_the_key(dsn: str) -> None:
    async with AsyncClient(dsn) as client:
        first = await client.trigger("t", idempotency_key="k")
        assert (await client.cancel(first)).canceled
        assert await client.trigger("t", idempotency_key="k") == first


async def test_bulk_with_keys_returns_ids_in_order(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        existing = await client.trigger("t", idempotency_key="b")
        ids = await client.trigger_many(
            [
                TriggerRequest("t", "a", idempotency_key="a"),
                TriggerRequest("t", "plain"),
                TriggerRequest("t", "b", idempotency_key="b"),
                TriggerRequest("t", "a again", idempotency_key="a"),
            ]
        )
    assert ids[2] == existing
    assert ids[3] == ids[0]
    assert len(set(ids)) == 3
    payloads = dict(db.execute("SELECT id, payload FROM fairlane.runs").fetchall())
    assert [payloads[i] for i in ids] == ["a", "plain", None, "a"]


async def test_twenty_concurrent_triggers_with_one_key_make_one_run(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """20 connections, released together, each in its own transaction held open a moment
    after triggering, so they really contend on the key."""

    async def trigger(conn: psycopg.AsyncConnection[Any], n: int) -> int:
        return await fairlane.trigger_async(conn, "charge", n, idempotency_key="once")

    got = await trigger_together(dsn, 20, trigger)
    assert len(got) == 20
    assert len(set(got)) == 1
    assert run_ids(db) == [got[0]]


@pytest.mark.parametrize("ends", ["commit", "rollback"])
@pytest.mark.parametrize("keys", ["in-order", "out-of-order"])
def test_a_trigger_waits_for_a_key_being_made_then_returns_that_run(
    dsn: str, db: psycopg.Connection[Any], ends: str, keys: str
) -> None:
    """b's insert of the key (as its run is made, when the call's keys come in order; at the
    end of the call, when they do not) waits for a, which made a run with it and has not
    committed: once a commits b returns a's run; once a rolls back b makes its own."""
    settings_rows(db, "default", "default")
    mine = TriggerRequest("charge", "b", idempotency_key="k")
    requests = (
        [mine] if keys == "in-order" else [TriggerRequest("charge", "z", idempotency_key="z"), mine]
    )
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        (made,) = ids_of(
            start_many(a, [TriggerRequest("charge", "a", idempotency_key="k")]).result()
        )
        pending = start_many(b, requests)
        b.blocked()
        if ends == "commit":
            a.commit()
        else:
            a.rollback()
        got = ids_of(pending.result())[-1]
        b.commit()
    holder = db.execute(
        "SELECT id, payload FROM fairlane.runs WHERE idempotency_key = %s", (stored_key("k"),)
    ).fetchall()
    expected = (made, "a") if ends == "commit" else (got, "b")
    assert holder == [expected]
    assert (got == made) == (ends == "commit")


def test_two_triggers_freeing_one_failed_key_make_one_run(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """a frees the key of a FAILED run and makes a new run with it; b, deciding from the same
    FAILED holder, waits in its freeing UPDATE for a, finds the key already gone from that
    row, looks again and returns a's run. The failed run keeps its key as its inactive one."""
    with Client(dsn) as client:
        failed = client.trigger("charge", "first", idempotency_key="k")
    db.execute("UPDATE fairlane.runs SET status = 'FAILED' WHERE id = %s", (failed,))
    request = TriggerRequest("charge", "again", idempotency_key="k")
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        (made,) = ids_of(start_many(a, [request]).result())
        pending = start_many(b, [request])
        b.blocked()
        a.commit()
        assert ids_of(pending.result()) == [made]
        b.commit()
    rows = db.execute(
        "SELECT id, idempotency_key, inactive_idempotency_key FROM fairlane.runs ORDER BY id"
    ).fetchall()
    assert rows == [(failed, None, stored_key("k")), (made, stored_key("k"), None)]
