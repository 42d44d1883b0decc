"""One lock order for the whole keyed trigger path, across every request of a call.

Two keyed ``trigger_many`` calls whose requests come in opposite orders must wait for each
other, never deadlock: size limits are locked up front (environments, then queues), then
debounce keys, then idempotency keys, each in key order (docs/concurrency.md, "The global lock
order"). Each test pauses the first call part-way by a lock the second session took in an
earlier statement, one that comes first in the order, so that the second call really runs
while the first is in flight; on code that took the locks request by request, the two calls
deadlocked here.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import Debounce, TriggerRequest, limits
from fairlane.triggering.api import trigger_statement
from tests.helpers.interleave import sessions
from tests.helpers.trigger_steps import ids_of, made, settings_rows, start_many


def keyed(queue: str, key: str, **options: Any) -> TriggerRequest:
    return TriggerRequest("t", key, queue=queue, idempotency_key=key, **options)


def waiting_per_queue(db: psycopg.Connection[Any]) -> dict[str, int]:
    rows = db.execute(
        "SELECT queue, count(*) FROM fairlane.runs WHERE status IN ('QUEUED', 'DELAYED')"
        " GROUP BY queue"
    ).fetchall()
    return {queue: int(count) for queue, count in rows}


def test_size_limited_queues_in_opposite_orders_do_not_deadlock(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    for queue in ("q0", "q1", "q2"):
        limits.set_queue(db, "default", queue, size_limit=10)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        # b holds q0's size lock from an earlier statement: q0 comes first in the order.
        start_many(b, [keyed("q0", "b0")]).result()
        first = start_many(a, [keyed("q1", "a1"), keyed("q0", "a0"), keyed("q2", "a2")])
        a.blocked()  # on q0; request by request, a held q1 by now
        second = start_many(b, [keyed("q2", "b2"), keyed("q1", "b1")])
        # Up front, a waits for q0 holding nothing, so b's call runs through.
        assert not b.blocked_or_done(), "b waits for a: a took q1 before q0"
        b_ids = ids_of(second.result())
        b.commit()
        a_ids = ids_of(first.result())
        a.commit()
    assert len(set(a_ids + b_ids)) == 5
    assert waiting_per_queue(db) == {"q0": 2, "q1": 2, "q2": 2}


def test_environment_limits_in_opposite_orders_do_not_deadlock(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    for environment in ("e0", "e1", "e2"):
        limits.set_environment(db, environment, size_limit=10)
        settings_rows(db, environment, "default")

    def request(environment: str, key: str) -> TriggerRequest:
        return TriggerRequest("t", key, environment=environment, idempotency_key=key)

    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        start_many(b, [request("e0", "b0")]).result()
        first = start_many(a, [request("e1", "a1"), request("e0", "a0"), request("e2", "a2")])
        a.blocked()
        second = start_many(b, [request("e2", "b2"), request("e1", "b1")])
        assert not b.blocked_or_done(), "b waits for a: a took e1 before e0"
        ids_of(second.result())
        b.commit()
        ids_of(first.result())
        a.commit()
    rows = db.execute("SELECT environment, count(*) FROM fairlane.runs GROUP BY 1 ORDER BY 1")
    assert rows.fetchall() == [("e0", 2), ("e1", 2), ("e2", 2)]


def test_debounce_keys_in_opposite_orders_do_not_deadlock(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    def request(key: str) -> TriggerRequest:
        return TriggerRequest("t", key, debounce=Debounce(key[1:], "1m", mode="trailing"))

    settings_rows(db, "default", "default")
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        (made_by_b,) = ids_of(start_many(b, [request("b0")]).result())  # b holds key "0"
        first = start_many(a, [request("a1"), request("a0"), request("a2")])
        a.blocked()
        second = start_many(b, [request("b2"), request("b1")])
        assert not b.blocked_or_done(), "b waits for a: a locked key 1 before key 0"
        b_ids = ids_of(second.result())
        b.commit()
        a_ids = ids_of(first.result())
        a.commit()
    # One run per key; a came last, so its trailing triggers joined b's runs and gave them
    # their payloads.
    assert a_ids == [b_ids[1], made_by_b, b_ids[0]]
    payloads = dict(db.execute("SELECT id, payload FROM fairlane.runs").fetchall())
    assert payloads == {made_by_b: "a0", b_ids[1]: "a1", b_ids[0]: "a2"}


def test_idempotency_keys_in_opposite_orders_do_not_deadlock(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    settings_rows(db, "default", "default")
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        # b inserted key "k0" in an earlier statement: a's insert of k0 waits for b.
        (made_by_b,) = ids_of(start_many(b, [keyed("default", "k0")]).result())
        first = start_many(
            a, [keyed("default", "k1"), keyed("default", "k0"), keyed("default", "k2")]
        )
        a.blocked()
        second = start_many(b, [keyed("default", "k2"), keyed("default", "k1")])
        assert not b.blocked_or_done(), "b waits for a: a inserted k1 before k0"
        b_ids = ids_of(second.result())
        b.commit()
        a_ids = ids_of(first.result())
        a.commit()
    # b committed first, so every key is b's run and a's call found them all.
    assert a_ids == [b_ids[1], made_by_b, b_ids[0]]
    row = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert row == (3,)


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_first_use_rows_in_opposite_orders_do_not_deadlock(
    dsn: str, db: psycopg.Connection[Any], keyed: bool
) -> None:
    """New environments and queues get their rows in name order: an INSERT of a row another
    uncommitted trigger made waits for that trigger, like a lock."""

    def request(environment: str) -> TriggerRequest:
        key = "k" if keyed else None
        return TriggerRequest("t", environment=environment, queue=environment, idempotency_key=key)

    names = [f"env-{n:02}" for n in range(12)]
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        start_many(b, [request(names[0])]).result()  # b made env-00's rows
        first = start_many(a, [request(name) for name in reversed(names)])
        a.blocked()
        second = start_many(b, [request(name) for name in names[1:]])
        assert not b.blocked_or_done(), "b waits for a: a made rows before env-00's"
        assert len(made(second.result())) == len(names) - 1
        b.commit()
        assert len(made(first.result())) == len(names)
        a.commit()
    row = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert row == (len(names) if keyed else 2 * len(names),)


@pytest.mark.parametrize("ordered", [True, False], ids=["keys-in-order", "keys-out-of-order"])
def test_two_requests_with_one_key_in_a_call_get_one_run_the_first_decides(
    dsn: str, db: psycopg.Connection[Any], ordered: bool
) -> None:
    keys = ["a", "b", "a", "c"] if not ordered else ["a", "a", "b", "c"]
    with psycopg.connect(dsn) as conn:
        statement = trigger_statement(
            [TriggerRequest("t", n, idempotency_key=key) for n, key in enumerate(keys)]
        )
        ids = ids_of(conn.execute(statement.sql, statement.params).fetchall())
        conn.commit()
    first_of = {key: ids[keys.index(key)] for key in keys}
    assert ids == [first_of[key] for key in keys]
    made = list(dict.fromkeys(ids))
    assert made == sorted(made), "runs must be made in request order (ids are the FIFO order)"
    payloads = dict(db.execute("SELECT id, payload FROM fairlane.runs").fetchall())
    assert {payloads[first_of[key]] for key in keys} == {keys.index(key) for key in keys}
