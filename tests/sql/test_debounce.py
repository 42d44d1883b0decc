"""Debounce (point 3): one DELAYED run per key whose start each trigger pushes later; trailing
replaces its data, leading keeps it; a started run or a passed max_delay makes a new run;
idempotency is checked first; 20 concurrent triggers with one key make one run; and each
decision made from the key's row or its run, stepped statement by statement against the
trigger, cancel, promotion or pruning that changes them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import fairlane
from fairlane import AsyncClient, Client, Debounce, RunStatus, TriggerRequest
from fairlane.errors import TriggerOptionError
from tests.helpers import run_row, trigger_together
from tests.helpers.interleave import sessions
from tests.helpers.trigger_steps import ids_of, settings_rows, start_many

pytestmark = pytest.mark.anyio


def starts_in(db: psycopg.Connection[Any], run_id: int) -> float:
    row = db.execute(
        "SELECT extract(epoch FROM available_at - now()) FROM fairlane.runs WHERE id = %s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return float(row[0])


def age(db: psycopg.Connection[Any], run_id: int, seconds: float) -> None:
    """Make the run look ``seconds`` older (created and due earlier), instead of sleeping."""
    db.execute(
        "UPDATE fairlane.runs SET created_at = created_at - make_interval(secs => %s),"
        " available_at = available_at - make_interval(secs => %s) WHERE id = %s",
        (seconds, seconds, run_id),
    )


def run_count(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert row is not None
    return int(row[0])


async def test_later_triggers_push_the_delayed_run(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        first = await client.trigger("sync", 1, debounce=Debounce("user-1", "30s"))
        assert (await client.get_run(first)).status is RunStatus.DELAYED
        assert 25 < starts_in(db, first) <= 30
        age(db, first, 20)  # 20 s later: it would start in 10 s
        assert await client.trigger("sync", 2, debounce=Debounce("user-1", "30s")) == first
        assert 25 < starts_in(db, first) <= 30, "the trigger did not push the start"
        # A shorter delay never pulls the start earlier.
        assert await client.trigger("sync", 3, debounce=Debounce("user-1", "5s")) == first
        assert 25 < starts_in(db, first) <= 30
        # Leading (the default) keeps the first trigger's payload.
        assert (await client.get_run(first)).payload == 1
        # Keys are per environment and task.
        other_task = await client.trigger("other", debounce=Debounce("user-1", "30s"))
        other_env = await client.trigger(
            "sync", environment="e2", debounce=Debounce("user-1", "30s")
        )
        other_key = await client.trigger("sync", debounce=Debounce("user-2", "30s"))
    assert len({first, other_task, other_env, other_key}) == 4


async def test_explicit_delay_sets_the_first_start(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("sync", delay="2m", debounce=Debounce("k", "10s"))
    assert 115 < starts_in(db, run_id) <= 120


async def test_trailing_replaces_the_runs_data_leading_keeps_it(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    first_options: dict[str, Any] = {
        "metadata": {"v": 1},
        "tags": ["a"],
        "max_attempts": 2,
        "max_duration": 10,
        "machine": "small",
        "priority": 1,
    }
    last_options: dict[str, Any] = {
        "metadata": {"v": 3},
        "tags": ["c", "d"],
        "max_attempts": 7,
        "max_duration": "1m",
        "machine": "large-2x",
        "priority": 9,
    }
    columns = ("payload", "metadata", "tags", "max_attempts", "max_duration_s", "machine")
    async with AsyncClient(dsn) as client:
        trailing = Debounce("t", "30s", mode="trailing")
        run_id = await client.trigger("sync", "first", debounce=trailing, **first_options)
        await client.trigger("sync", "middle", debounce=trailing, tags=["b"])
        assert await client.trigger("sync", "last", debounce=trailing, **last_options) == run_id
        row = run_row(db, run_id)
        assert tuple(row[c] for c in columns) == ("last", {"v": 3}, ["c", "d"], 7, 60.0, "large-2x")
        assert row["priority"] == 1, "priority is not among the replaced options"

        leading = Debounce("l", "30s", mode="leading")
        run_id = await client.trigger("sync", "first", debounce=leading, **first_options)
        assert await client.trigger("sync", "last", debounce=leading, **last_options) == run_id
        row = run_row(db, run_id)
        assert tuple(row[c] for c in columns) == ("first", {"v": 1}, ["a"], 2, 10.0, "small")


@pytest.mark.parametrize("bulk", [False, True], ids=["one-by-one", "one-call"])
async def test_trailing_replaces_only_the_options_the_later_trigger_gives(
    dsn: str, db: psycopg.Connection[Any], bulk: bool
) -> None:
    """As in the seeds' engine: the payload always, the other options when given (an empty
    list or mapping is given); what a trigger leaves out keeps the run's value."""
    trailing = Debounce("t", "30s", mode="trailing")
    first = TriggerRequest(
        "sync",
        "first",
        debounce=trailing,
        metadata={"v": 1},
        tags=["a"],
        max_attempts=7,
        max_duration="2m",
        machine="large-2x",
    )
    bare = TriggerRequest("sync", "bare", debounce=trailing)
    emptied = TriggerRequest(
        "sync", "emptied", debounce=trailing, metadata={}, tags=[], max_attempts=1
    )
    columns = ("payload", "metadata", "tags", "max_attempts", "max_duration_s", "machine")
    async with AsyncClient(dsn) as client:
        if bulk:
            ids = await client.trigger_many([first, bare])
        else:
            ids = [*await client.trigger_many([first]), *await client.trigger_many([bare])]
        assert ids[0] == ids[1]
        row = run_row(db, ids[0])
        assert tuple(row[c] for c in columns) == ("bare", {"v": 1}, ["a"], 7, 120.0, "large-2x")
        assert await client.trigger_many([emptied]) == [ids[0]]
    row = run_row(db, ids[0])
    assert tuple(row[c] for c in columns) == ("emptied", {}, [], 1, 120.0, "large-2x")


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "debounced"])
async def test_options_not_given_take_their_defaults_on_a_new_run(
    dsn: str, db: psycopg.Connection[Any], keyed: bool
) -> None:
    debounce = Debounce("new", "10s", mode="trailing") if keyed else None
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("sync", debounce=debounce)
    row = run_row(db, run_id)
    columns = ("payload", "metadata", "tags", "max_attempts", "max_duration_s", "machine")
    assert tuple(row[c] for c in columns) == (None, {}, [], 3, None, None)


@pytest.mark.parametrize("started", ["QUEUED", "EXECUTING", "COMPLETED", "CANCELED", "retry"])
async def test_once_the_run_has_started_the_next_trigger_makes_a_new_run(
    dsn: str, db: psycopg.Connection[Any], started: str
) -> None:
    async with AsyncClient(dsn) as client:
        first = await client.trigger("sync", debounce=Debounce("k", "10s"))
        if started == "QUEUED":
            # Due and promoted, as the periodic job does.
            age(db, first, 11)
            db.execute("SELECT fairlane.promote_delayed_runs()")
        elif started == "CANCELED":
            await client.cancel(first)
        elif started == "retry":
            # Back to DELAYED for a retry backoff: it has started once, it is not debounceable.
            db.execute("UPDATE fairlane.runs SET attempts = 1 WHERE id = %s", (first,))
        else:
            db.execute("UPDATE fairlane.runs SET status = %s WHERE id = %s", (started, first))
        second = await client.trigger("sync", debounce=Debounce("k", "10s"))
        assert second != first
        assert (await client.get_run(second)).status is RunStatus.DELAYED
        # The new run is the key's run now.
        assert await client.trigger("sync", debounce=Debounce("k", "10s")) == second


async def test_max_delay_per_trigger_makes_a_new_run(dsn: str, db: psycopg.Connection[Any]) -> None:
    window = Debounce("k", "10s", max_delay="1m")
    async with AsyncClient(dsn) as client:
        first = await client.trigger("sync", debounce=window)
        age(db, first, 45)  # 45 s + 10 s = 55 s < 60 s: still within the window
        assert await client.trigger("sync", debounce=window) == first
        age(db, first, 4)  # 49 s + 10 s = 59 s: not past it yet
        assert await client.trigger("sync", debounce=window) == first
        age(db, first, 2)  # 51 s + 10 s = 61 s: past it
        due = starts_in(db, first)
        second = await client.trigger("sync", debounce=window)
        assert second != first
        assert starts_in(db, first) == pytest.approx(due, abs=0.5), "the old run was pushed"
        assert await client.trigger("sync", debounce=window) == second


async def test_server_maximum_applies_without_max_delay(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        first = await client.trigger("sync", debounce=Debounce("k", "10s"))
        age(db, first, 585)  # default maximum: 10 minutes
        assert await client.trigger("sync", debounce=Debounce("k", "10s")) == first
        age(db, first, 10)
        assert await client.trigger("sync", debounce=Debounce("k", "10s")) != first

        # The setting is read at every trigger.
        db.execute("UPDATE fairlane.settings SET value = '30' WHERE name = 'debounce_max_delay_s'")
        third = await client.trigger("sync", debounce=Debounce("j", "10s"))
        age(db, third, 25)
        assert await client.trigger("sync", debounce=Debounce("j", "10s")) != third


async def test_idempotency_is_checked_before_debounce(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        first = await client.trigger(
            "sync", 1, idempotency_key="i", debounce=Debounce("k", "30s", mode="trailing")
        )
        age(db, first, 20)
        # Same idempotency key: the cached run comes back untouched (no push, no new data).
        assert (
            await client.trigger(
                "sync", 2, idempotency_key="i", debounce=Debounce("k", "30s", mode="trailing")
            )
            == first
        )
        assert starts_in(db, first) < 15
        assert (await client.get_run(first)).payload == 1
        # Another idempotency key: debounce applies.
        assert (
            await client.trigger(
                "sync", 3, idempotency_key="j", debounce=Debounce("k", "30s", mode="trailing")
            )
            == first
        )
        assert starts_in(db, first) > 25
        assert (await client.get_run(first)).payload == 3


@pytest.mark.parametrize(
    ("debounce", "option"),
    [
        (Debounce("k", "0.5s"), "debounce.delay"),
        (Debounce("k", "soon"), "debounce.delay"),
        (Debounce("k", "10s", max_delay="5s"), "debounce.max_delay"),
        (Debounce("k", "10s", mode="sideways"), "debounce.mode"),  # type: ignore[arg-type]
        (Debounce("", "10s"), "debounce.key"),
    ],
)
async def test_bad_debounce_options(dsn: str, debounce: Debounce, option: str) -> None:
    async with AsyncClient(dsn) as client:
        with pytest.raises(TriggerOptionError) as refused:
            await client.trigger("sync", debounce=debounce)
    assert refused.value.option == option


async def test_twenty_concurrent_triggers_with_one_key_make_one_run(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async def trigger(conn: psycopg.AsyncConnection[Any], n: int) -> int:
        debounce = Debounce("burst", "1m", mode="trailing")
        return await fairlane.trigger_async(conn, "sync", n, debounce=debounce)

    got = await trigger_together(dsn, 20, trigger)
    assert len(got) == 20
    assert len(set(got)) == 1
    assert run_count(db) == 1
    # Trailing: the run carries the payload of whichever trigger committed last.
    assert run_row(db, got[0])["payload"] in range(20)


async def test_stale_keys_are_pruned(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        live = await client.trigger("sync", debounce=Debounce("live", "1m"))
        started = await client.trigger("sync", debounce=Debounce("started", "1m"))
    db.execute("UPDATE fairlane.runs SET status = 'QUEUED' WHERE id = %s", (started,))
    row = db.execute("SELECT fairlane.prune_debounce_keys()").fetchone()
    assert row == ({"pruned": 1},)
    keys = db.execute("SELECT key, run_id FROM fairlane.debounce_keys").fetchall()
    assert keys == [("live", live)]
    jobs = db.execute("SELECT name FROM fairlane.periodic_jobs WHERE name = 'prune_debounce_keys'")
    assert jobs.fetchall() == [("prune_debounce_keys",)]


async def test_debounce_delay_as_a_timedelta(dsn: str) -> None:
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("sync", debounce=Debounce("k", timedelta(seconds=3)))
        assert (await client.get_run(run_id)).status is RunStatus.DELAYED


# --- Interleavings: each decision made from the key's row or its run ---------------------

TRAILING = Debounce("k", "30s", mode="trailing")


def key_run(db: psycopg.Connection[Any]) -> int | None:
    row = db.execute("SELECT run_id FROM fairlane.debounce_keys WHERE key = 'k'").fetchone()
    return None if row is None else row[0]


@pytest.mark.parametrize("ends", ["commit", "rollback"])
def test_a_trigger_of_a_new_key_waits_for_the_one_making_it(
    dsn: str, db: psycopg.Connection[Any], ends: str
) -> None:
    """Both find no row for the key; b's insert of it waits for a's, then b locks the row a
    committed and joins a's run, or inserts the row itself if a rolled back."""
    settings_rows(db, "default", "default")
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        (made,) = ids_of(start_many(a, [TriggerRequest("sync", "a", debounce=TRAILING)]).result())
        pending = start_many(b, [TriggerRequest("sync", "b", debounce=TRAILING)])
        b.blocked()
        if ends == "commit":
            a.commit()
        else:
            a.rollback()
        (got,) = ids_of(pending.result())
        b.commit()
    assert (got == made) == (ends == "commit")
    assert run_count(db) == 1
    assert key_run(db) == got
    assert run_row(db, got)["payload"] == "b"


def test_a_trigger_of_a_held_key_sees_the_run_its_holder_made(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The key's run has started, so a makes a new one and points the key at it; b waits for
    the key's row and, reading the key in a later statement, joins a's new run instead of
    making a third."""
    with Client(dsn) as client:
        started = client.trigger("sync", "first", debounce=TRAILING)
    db.execute("UPDATE fairlane.runs SET status = 'QUEUED' WHERE id = %s", (started,))
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        (made,) = ids_of(start_many(a, [TriggerRequest("sync", "a", debounce=TRAILING)]).result())
        pending = start_many(b, [TriggerRequest("sync", "b", debounce=TRAILING)])
        b.blocked()
        a.commit()
        assert ids_of(pending.result()) == [made]
        b.commit()
    assert made != started
    assert run_count(db) == 2
    assert key_run(db) == made


def test_a_cancel_holding_the_run_makes_the_trigger_wait_then_make_a_new_run(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """join_debounced_run reads the run under its row lock: it waits for the cancel, then
    sees CANCELED and leaves it alone, instead of pushing (and overwriting) a canceled run."""
    with Client(dsn) as client:
        first = client.trigger("sync", "first", debounce=TRAILING)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        a.run("SELECT canceled FROM fairlane.cancel_run(%s)", (first,))
        pending = start_many(b, [TriggerRequest("sync", "b", debounce=TRAILING)])
        b.blocked()
        a.commit()
        (got,) = ids_of(pending.result())
        b.commit()
    assert got != first
    assert run_row(db, first)["status"] == "CANCELED"
    assert run_row(db, first)["payload"] == "first"
    assert key_run(db) == got


def test_promotion_skips_a_run_a_trigger_is_pushing(dsn: str, db: psycopg.Connection[Any]) -> None:
    """A run that is due is being pushed back by a trigger: the promotion skips it (SKIP
    LOCKED) rather than start it under the trigger, and after the push it is not due."""
    with Client(dsn) as client:
        first = client.trigger("sync", "first", debounce=TRAILING)
    age(db, first, 31)  # due a second ago
    with sessions(dsn, 2) as (a, b):
        a.begin()
        (joined,) = ids_of(start_many(a, [TriggerRequest("sync", "a", debounce=TRAILING)]).result())
        promoting = b.start("SELECT fairlane.promote_delayed_runs()")
        assert not b.blocked_or_done()
        promoting.result()
        a.commit()
    assert joined == first
    b_row = run_row(db, first)
    assert (b_row["status"], b_row["payload"]) == ("DELAYED", "a")
    db.execute("SELECT fairlane.promote_delayed_runs()")
    assert run_row(db, first)["status"] == "DELAYED"


def test_the_pruner_skips_a_key_a_trigger_holds(dsn: str, db: psycopg.Connection[Any]) -> None:
    """The key's run started, so the key looks stale; a trigger holding it is pointing it at a
    new run, so the pruner skips it (SKIP LOCKED) and, once the trigger commits, keeps it."""
    with Client(dsn) as client:
        started = client.trigger("sync", "first", debounce=TRAILING)
    db.execute("UPDATE fairlane.runs SET status = 'QUEUED' WHERE id = %s", (started,))
    with sessions(dsn, 2) as (a, b):
        a.begin()
        (made,) = ids_of(start_many(a, [TriggerRequest("sync", "a", debounce=TRAILING)]).result())
        pruning = b.start("SELECT fairlane.prune_debounce_keys()")
        assert not b.blocked_or_done()
        assert pruning.result() == [({"pruned": 0},)]
        a.commit()
        assert b.run("SELECT fairlane.prune_debounce_keys()") == [({"pruned": 0},)]
    assert key_run(db) == made


def test_a_trigger_waits_for_the_pruner_deleting_its_key(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The pruner deleted the stale key and has not committed: the trigger's insert of the
    key waits for it, then makes the key's row again, with a new run."""
    with Client(dsn) as client:
        started = client.trigger("sync", "first", debounce=TRAILING)
    db.execute("UPDATE fairlane.runs SET status = 'QUEUED' WHERE id = %s", (started,))
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        assert a.run("SELECT fairlane.prune_debounce_keys()") == [({"pruned": 1},)]
        pending = start_many(b, [TriggerRequest("sync", "b", debounce=TRAILING)])
        b.blocked()
        a.commit()
        (made,) = ids_of(pending.result())
        b.commit()
    assert made != started
    assert key_run(db) == made
