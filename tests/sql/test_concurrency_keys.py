"""Concurrency keys (sql/claim/keys.sql): a queue's limit per key, its total_limit across keys,
keyless runs as one more key, round robin across keys, waiting runs holding no key slot, and the
key stored by every trigger path of the library."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest

from fairlane import TaskRegistry, TriggerRequest, limits, trigger, trigger_many
from fairlane.engine.sqlfiles import query
from fairlane.errors import TriggerOptionError
from fairlane.worker.context import RunContext
from tests.helpers import claim_params
from tests.helpers.interleave import Session, sessions

CLAIM = query("claim_runs", "fairlane")


def keyed(db: psycopg.Connection[Any], key: str | None, count: int, **options: Any) -> list[int]:
    requests = [
        TriggerRequest("t", i, environment="acme", concurrency_key=key, **options)
        for i in range(count)
    ]
    return trigger_many(db, requests)


def claim(db: psycopg.Connection[Any], limit: int = 100) -> list[str | None]:
    """Claim as a worker does; the keys of the runs it started."""
    ids = [row[0] for row in db.execute(CLAIM, claim_params(limit=limit)).fetchall()]
    return [key_of(db, run_id) for run_id in ids]


def key_of(db: psycopg.Connection[Any], run_id: int) -> str | None:
    row = db.execute(
        "SELECT concurrency_key FROM fairlane.runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def finish(db: psycopg.Connection[Any], key: str | None = None) -> None:
    """End the key's executing runs (all of them without a key), releasing their slots."""
    db.execute(
        "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now(), lease_token = NULL"
        " WHERE status = 'EXECUTING' AND (%(key)s::text IS NULL OR concurrency_key = %(key)s)",
        {"key": key},
    )


def test_the_queue_limit_holds_per_key(db: psycopg.Connection[Any]) -> None:
    for key in ("a", "b", "c"):
        keyed(db, key, 5)
    limits.set_queue(db, "acme", "default", concurrency_limit=1)
    assert Counter(claim(db)) == Counter("abc")
    assert claim(db) == []
    finish(db, "b")
    assert claim(db) == ["b"]


def test_a_key_holding_slots_fills_up_to_its_limit(db: psycopg.Connection[Any]) -> None:
    keyed(db, "a", 5)
    keyed(db, "b", 5)
    limits.set_queue(db, "acme", "default", concurrency_limit=3)
    assert claim(db, 1) == ["a"]
    assert Counter(claim(db)) == Counter({"a": 2, "b": 3})
    assert claim(db) == []


def test_keyless_runs_of_a_keyed_queue_share_one_key(db: psycopg.Connection[Any]) -> None:
    keyed(db, None, 3)
    keyed(db, "a", 3)
    limits.set_queue(db, "acme", "default", concurrency_limit=2)
    assert Counter(claim(db)) == Counter({None: 2, "a": 2})
    assert claim(db) == []


def test_the_total_limit_caps_the_queue_across_its_keys(db: psycopg.Connection[Any]) -> None:
    for key in "abcde":
        keyed(db, key, 2)
    settings = limits.set_queue(db, "acme", "default", concurrency_limit=1, total_limit=3)
    assert (settings.concurrency_limit, settings.total_limit) == (1, 3)
    first = claim(db)
    assert len(first) == 3
    assert len(set(first)) == 3
    assert claim(db) == []
    finish(db)
    # The ring goes on where it stopped: the keys left out come first.
    assert set(claim(db)) == set("abcde") - set(first) | {first[0]}


def test_light_keys_are_served_past_a_hot_backlog(db: psycopg.Connection[Any]) -> None:
    keyed(db, "hot", 2_000)
    for light in range(20):
        keyed(db, f"light{light:02}", 2)
    limits.set_queue(db, "acme", "default", concurrency_limit=2)
    started: Counter[str | None] = Counter()
    for _ in range(3):
        got = claim(db, 20)
        assert got.count("hot") <= 2
        started.update(got)
        finish(db)
    assert all(started[f"light{light:02}"] == 2 for light in range(20)), started


def test_keyless_runs_are_served_past_a_hot_keys_backlog(db: psycopg.Connection[Any]) -> None:
    """Keyless runs are one more key: queued behind any number of a key's runs that wait for
    its slot, they still take their turn in every claim, and so do a light key's."""
    keyed(db, "hot", 3_000)
    keyed(db, None, 3)
    keyed(db, "light", 3)
    limits.set_queue(db, "acme", "default", concurrency_limit=1)
    for _ in range(3):
        assert Counter(claim(db, 10)) == Counter({"hot": 1, None: 1, "light": 1})
        finish(db)
    assert Counter(claim(db, 10)) == Counter({"hot": 1})


def test_without_a_limit_keys_still_take_turns(db: psycopg.Connection[Any]) -> None:
    keyed(db, "hot", 100)
    keyed(db, "light", 3)
    assert Counter(claim(db, 4)) == Counter({"hot": 2, "light": 2})


def test_keys_with_more_runs_share_the_room_the_ring_left(db: psycopg.Connection[Any]) -> None:
    """A claim larger than the keys: after the ring, turns of an even share each until the room
    is gone, a key that runs out leaving its share to the others; keyless runs come after the
    keys in each turn."""
    keyed(db, "a", 5)
    keyed(db, "b", 1)
    keyed(db, "c", 10)
    keyed(db, None, 4)
    # Ring: a, b, c, keyless. Turn of 2 each: b has none left. Turn of 1: a and c.
    assert Counter(claim(db, 12)) == Counter({"a": 4, "b": 1, "c": 4, None: 3})
    assert Counter(claim(db, 100)) == Counter({"a": 1, "c": 6, None: 1})


def test_a_key_whose_first_run_is_of_another_task_gives_the_claimers(
    db: psycopg.Connection[Any],
) -> None:
    """The ring locks each key's first run as the index found it, re-checking the filters: one
    the claimer has no handler for sends it on to the key's next run."""
    _, mine = trigger_many(
        db,
        [
            TriggerRequest("other", environment="acme", concurrency_key="a"),
            TriggerRequest("t", environment="acme", concurrency_key="a"),
        ],
    )
    got = db.execute(CLAIM, claim_params(limit=10, tasks=["t"])).fetchall()
    assert [row[0] for row in got] == [mine]


def test_a_key_whose_first_run_another_transaction_holds_gives_its_next(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A key's first run that another transaction holds (a cancel in flight) is skipped, and the
    key gives its next run in the same ring."""
    first, second = keyed(db, "a", 2)
    other = keyed(db, "b", 1)
    with sessions(dsn, 1) as (holder,):
        holder.begin()
        holder.run("SELECT 1 FROM fairlane.runs WHERE id = %s FOR UPDATE", (first,))
        got = db.execute(CLAIM, claim_params(limit=10)).fetchall()
        holder.rollback()
    assert sorted(row[0] for row in got) == sorted([second, *other])


def test_a_waiting_run_holds_no_key_slot_until_it_is_ready(db: psycopg.Connection[Any]) -> None:
    keyed(db, "a", 3)
    limits.set_queue(db, "acme", "default", concurrency_limit=1)
    assert claim(db) == ["a"]
    # Its handler waits and lets go of its worker (detach_waiting_run: WAITING, no lease).
    db.execute(
        "UPDATE fairlane.runs SET status = 'WAITING', lease_token = NULL WHERE status = 'EXECUTING'"
    )
    assert claim(db) == ["a"]
    finish(db)
    # A waiting run whose waitpoints completed is owed its slot: nothing else starts.
    db.execute(
        "UPDATE fairlane.runs SET status = 'WAITING', resume_ready = true"
        " WHERE status = 'COMPLETED' AND concurrency_key = 'a'"
    )
    assert claim(db) == []


def test_every_library_trigger_path_stores_the_key(db: psycopg.Connection[Any]) -> None:
    tasks = TaskRegistry()

    @tasks.task(concurrency_key=lambda payload: f"user-{payload['user']}")
    def per_user(ctx: RunContext, payload: dict[str, int]) -> None:
        return None

    @tasks.task(concurrency_key="fixed")
    def fixed(ctx: RunContext, payload: None) -> None:
        return None

    ids = [
        trigger(db, "t", None, concurrency_key="one"),
        trigger_many(db, [TriggerRequest("t", concurrency_key="many")])[0],
        trigger(db, "t", None, concurrency_key="idem", idempotency_key="k"),
        per_user.trigger(db, {"user": 7}),
        per_user.trigger(db, {"user": 7}, concurrency_key="given"),
        fixed.trigger(db, None),
    ]
    assert [key_of(db, run_id) for run_id in ids] == [
        "one",
        "many",
        "idem",
        "user-7",
        "given",
        "fixed",
    ]


@pytest.mark.parametrize("bad", ["", 7, "x" * 257, "nul\x00"])
def test_a_bad_key_is_refused_naming_its_item(db: psycopg.Connection[Any], bad: Any) -> None:
    requests = [TriggerRequest("t"), TriggerRequest("t", concurrency_key=bad)]
    with pytest.raises(TriggerOptionError) as refused:
        trigger_many(db, requests)
    assert (refused.value.option, refused.value.index) == ("concurrency_key", 1)
    row = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert row == (0,)


def test_a_task_key_that_is_neither_text_nor_a_function_is_refused() -> None:
    tasks = TaskRegistry()
    with pytest.raises(TriggerOptionError):

        @tasks.task(concurrency_key=5)  # type: ignore[arg-type]
        def bad(ctx: RunContext, payload: None) -> None:
            return None


def claim_open(session: Session, *, wait: bool = False) -> Any:
    """A claim in a transaction the session leaves open; with ``wait`` it must first wait."""
    session.begin()
    pending = session.start(CLAIM, claim_params(limit=10, worker_id=session.name))
    if wait:
        session.blocked()
    return pending


def test_two_claims_on_a_key_at_limit_one_start_one_of_its_runs(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The second claim waits for the environment's row the first holds, then counts the key's
    slot holders in a later statement: it sees the first claim's run of key a, starts none of
    a's, and takes the other key's run."""
    keyed(db, "a", 3)
    other = keyed(db, "b", 1)
    limits.set_queue(db, "acme", "default", concurrency_limit=1, total_limit=2)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        first = a.start(CLAIM, claim_params(limit=1, worker_id=a.name)).result(timeout=30)
        assert [key_of(db, row[0]) for row in first] == ["a"]
        pending = claim_open(b, wait=True)
        assert b.blockers() == [a.pid]
        a.commit()
        second = pending.result(timeout=30)
        b.commit()
    assert [row[0] for row in second] == other
    assert claim(db) == []


def test_a_claim_that_waited_sees_the_key_slot_the_other_released(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The other order: a completion of key a commits while a claim waits for the row; the
    claim counts after the lock and starts a's next run."""
    keyed(db, "a", 2)
    limits.set_queue(db, "acme", "default", concurrency_limit=1)
    assert claim(db) == ["a"]
    with sessions(dsn, 2) as (a, b):
        a.begin()
        a.run("SELECT 1 FROM fairlane.environments WHERE name = 'acme' FOR UPDATE")
        a.run(
            "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now()"
            " WHERE status = 'EXECUTING'"
        )
        pending = claim_open(b, wait=True)
        a.commit()
        got = pending.result(timeout=30)
        b.commit()
    assert [key_of(db, row[0]) for row in got] == ["a"]


def test_the_busiest_keys_come_first(db: psycopg.Connection[Any]) -> None:
    keyed(db, "big", 5)
    keyed(db, "small", 2)
    keyed(db, "idle", 1)
    keyed(db, None, 3)
    limits.set_queue(db, "acme", "default", concurrency_limit=2)
    claim(db)
    finish(db, "idle")
    rows = limits.busiest_keys(db, "acme", "default", most=2)
    assert rows == [
        {"concurrency_key": "big", "running": 2, "queued": 3},
        {"concurrency_key": "small", "running": 2, "queued": 0},
    ]
