"""Waitpoints: runs wait on runs, times and tokens without holding a slot."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, TriggerRequest, Worker, limits, trigger
from fairlane.cli import main
from fairlane.waitpoints import WaitResult, complete_token, create_token
from tests.helpers import run_status, running, wait_until

pytestmark = pytest.mark.anyio


def result_of(db: psycopg.Connection[Any], run_id: int) -> Any:
    row = db.execute("SELECT result FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return row[0]


def as_dict(result: WaitResult) -> dict[str, Any]:
    return {"ok": result.ok, "output": result.output, "error": result.error}


def registry() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("double")
    async def double(ctx: RunContext, payload: int) -> int:
        await anyio.sleep(0.01 * (5 - payload % 5))  # later items finish first
        return payload * 2

    @tasks.task("explode")
    async def explode(ctx: RunContext, payload: Any) -> None:
        raise ValueError("child failed")

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: dict[str, Any]) -> Any:
        if payload["mode"] == "one":
            return as_dict(
                await ctx.trigger_and_wait("double", 21, queue=payload.get("queue", "default"))
            )
        if payload["mode"] == "fail":
            return as_dict(await ctx.trigger_and_wait("explode", None, max_attempts=1))
        if payload["mode"] == "batch":
            requests = [TriggerRequest("double", i) for i in range(8)]
            return [r.output for r in await ctx.batch_trigger_and_wait(requests)]
        if payload["mode"] == "sleep":
            started = time.monotonic()
            await ctx.wait_until(payload["seconds"])
            return time.monotonic() - started
        if payload["mode"] == "token":
            return as_dict(
                await ctx.wait_for_token(payload["token"], timeout=payload.get("timeout"))
            )
        if payload["mode"] == "runs":
            return [as_dict(r) for r in await ctx.wait_for_runs(payload["runs"])]
        raise AssertionError(payload)

    return tasks


async def test_trigger_and_wait_returns_the_child_result(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    parent = trigger(db, "parent", {"mode": "one"})
    failing = trigger(db, "parent", {"mode": "fail"})
    async with running(Worker(registry(), dsn, concurrency=4)):
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="parent")
        await wait_until(lambda: run_status(db, failing) == "COMPLETED", what="failing parent")
    assert result_of(db, parent) == {"ok": True, "output": 42, "error": None}
    outcome = result_of(db, failing)
    assert outcome["ok"] is False
    assert outcome["error"]["status"] == "FAILED"
    assert "child failed" in outcome["error"]["error"]["message"]


async def test_batch_results_come_back_in_item_order(dsn: str, db: psycopg.Connection[Any]) -> None:
    parent = trigger(db, "parent", {"mode": "batch"})
    async with running(Worker(registry(), dsn, concurrency=10)):
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="parent")
    assert result_of(db, parent) == [i * 2 for i in range(8)]


async def test_wait_until_sleeps_without_a_slot(dsn: str, db: psycopg.Connection[Any]) -> None:
    parent = trigger(db, "parent", {"mode": "sleep", "seconds": 0.5})
    async with running(Worker(registry(), dsn, concurrency=2)):
        await wait_until(lambda: run_status(db, parent) == "WAITING", what="waiting")
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="parent")
    assert result_of(db, parent) >= 0.5


async def test_tokens_complete_by_hand_or_time_out(dsn: str, db: psycopg.Connection[Any]) -> None:
    token = create_token(db, idempotency_key="approval-7")
    assert create_token(db, idempotency_key="approval-7") == token
    waiting = trigger(db, "parent", {"mode": "token", "token": token})
    quick = create_token(db)
    timing_out = trigger(db, "parent", {"mode": "token", "token": quick, "timeout": 0.3})
    async with running(Worker(registry(), dsn, concurrency=4)):
        await wait_until(lambda: run_status(db, waiting) == "WAITING", what="waiting on token")
        assert complete_token(db, token, {"approved": True})
        assert not complete_token(db, token, {"approved": False})  # already complete
        await wait_until(lambda: run_status(db, waiting) == "COMPLETED", what="resumed")
        await wait_until(lambda: run_status(db, timing_out) == "COMPLETED", what="timed out")
    assert result_of(db, waiting) == {"ok": True, "output": {"approved": True}, "error": None}
    assert result_of(db, timing_out)["error"]["code"] == "WAITPOINT_TIMEOUT"


async def test_a_parent_waiting_on_a_child_in_its_capped_queue_does_not_deadlock(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "default", "serial", concurrency_limit=1)
    parent = trigger(db, "parent", {"mode": "one", "queue": "serial"}, queue="serial")
    worker = Worker(registry(), dsn, concurrency=1, lease_seconds=1.5)
    signals = worker.enable_test_signals()
    async with running(worker):
        await signals.waiting.wait_for(parent)
        child = await signals.started.wait_for(lambda run_id: run_id != parent)
        await signals.released.wait_for(parent)
    assert result_of(db, parent)["output"] == 42
    # The child ran in the one slot while its parent waited, and the parent resumed after.
    waited, ran = signals.index("waiting", parent), signals.index("started", child)
    assert waited < ran < signals.index("resumed", parent)
    assert db.execute("SELECT task FROM fairlane.runs WHERE id = %s", (child,)).fetchone() == (
        "double",
    )


async def test_a_waiting_run_keeps_its_lease_by_heartbeats(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    token = create_token(db)
    parent = trigger(db, "parent", {"mode": "token", "token": token})
    lease = "SELECT lease_until FROM fairlane.runs WHERE id = %s"
    worker = Worker(registry(), dsn, lease_seconds=0.6)
    async with running(worker):
        await wait_until(lambda: run_status(db, parent) == "WAITING", what="waiting")
        first = db.execute(lease, (parent,)).fetchone()
        # Well past the lease (six beats of a third of it): heartbeats must have moved it, or
        # the reclaimer would have taken the run.
        beats = worker.stats.heartbeats
        await wait_until(lambda: worker.stats.heartbeats >= beats + 6, within=10, what="beats")
        assert run_status(db, parent) == "WAITING"
        later = db.execute(lease, (parent,)).fetchone()
        assert first is not None
        assert later is not None
        assert later[0] > first[0]
        complete_token(db, token, "go")
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="resumed")
    row = db.execute("SELECT attempts FROM fairlane.runs WHERE id = %s", (parent,)).fetchone()
    assert row == (1,)


async def test_a_resumed_run_goes_ahead_of_fresh_work_in_its_queue(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "default", "serial", concurrency_limit=1)
    token = create_token(db)
    parent = trigger(db, "parent", {"mode": "token", "token": token}, queue="serial")
    async with running(Worker(registry(), dsn, concurrency=4)):
        await wait_until(lambda: run_status(db, parent) == "WAITING", what="waiting")
        fresh = [trigger(db, "double", i, queue="serial") for i in range(30)]
        await wait_until(lambda: run_status(db, fresh[2]) == "COMPLETED", what="fresh work")
        released = db.execute("SELECT now()").fetchone()
        complete_token(db, token, "go")
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="resumed")
        started_in_between = db.execute(
            "SELECT count(*) FROM fairlane.runs WHERE id = ANY(%s) AND started_at > %s "
            "AND started_at < (SELECT finished_at FROM fairlane.runs WHERE id = %s)",
            (fresh, released and released[0], parent),
        ).fetchone()
        remaining = db.execute(
            "SELECT count(*) FROM fairlane.runs WHERE id = ANY(%s) AND status = 'QUEUED'",
            (fresh,),
        ).fetchone()
    # Fresh work was still queued, yet none of it started between the token's completion and
    # the parent's finish (bar a claim already in flight): the parent took the slot first.
    assert remaining is not None
    assert remaining[0] > 10
    assert started_in_between is not None
    assert started_in_between[0] <= 1


async def test_waits_on_runs_that_end_badly_return_their_error(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    children = [trigger(db, "double", 1, queue="held") for _ in range(5)]
    limits.set_queue(db, "default", "held", paused=True)
    parent = trigger(db, "parent", {"mode": "runs", "runs": children})
    async with running(Worker(registry(), dsn, concurrency=2)):
        await wait_until(lambda: run_status(db, parent) == "WAITING", what="waiting")
        for child, status in zip(
            children, ["EXPIRED", "CANCELED", "CRASHED", "TIMED_OUT", "SYSTEM_FAILURE"], strict=True
        ):
            assert run_status(db, parent) == "WAITING"
            db.execute(
                "UPDATE fairlane.runs SET status = %s, finished_at = now(), "
                "error = jsonb_build_object('code', %s::text) WHERE id = %s",
                (status, status.lower(), child),
            )
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="resumed")
    outcomes = result_of(db, parent)
    assert [o["error"]["status"] for o in outcomes] == [
        "EXPIRED",
        "CANCELED",
        "CRASHED",
        "TIMED_OUT",
        "SYSTEM_FAILURE",
    ]
    assert not any(o["ok"] for o in outcomes)


def test_completion_and_wake_up_commit_together(db: psycopg.Connection[Any], dsn: str) -> None:
    child = trigger(db, "double", 1)
    parent = trigger(db, "double", 2)
    link = {"p": parent, "c": child}
    for statement in (
        "UPDATE fairlane.runs SET status = 'WAITING', lease_token = gen_random_uuid() "
        "WHERE id = %(p)s",
        "UPDATE fairlane.runs SET has_waiters = true WHERE id = %(c)s",
        "INSERT INTO fairlane.waitpoints (kind, run_id) VALUES ('RUN', %(c)s)",
        "INSERT INTO fairlane.run_waitpoints (run_id, attempt, position, item, waitpoint_id) "
        "SELECT %(p)s, 1, 0, 0, id FROM fairlane.waitpoints WHERE run_id = %(c)s",
    ):
        db.execute(statement, link)
    finish = "UPDATE fairlane.runs SET status = 'COMPLETED', result = '2' WHERE id = %s"
    with psycopg.connect(dsn) as conn:
        conn.execute(finish, (child,))
        conn.rollback()
    ready = "SELECT resume_ready FROM fairlane.runs WHERE id = %s"
    assert db.execute(ready, (parent,)).fetchone() == (False,)
    assert db.execute("SELECT status FROM fairlane.waitpoints").fetchone() == ("PENDING",)
    with psycopg.connect(dsn) as conn:
        conn.execute(finish, (child,))
    assert db.execute(ready, (parent,)).fetchone() == (True,)
    assert db.execute("SELECT status FROM fairlane.waitpoints").fetchone() == ("COMPLETED",)


async def test_waitpoints_are_made_only_when_someone_waits(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    lonely = trigger(db, "double", 3)
    async with running(Worker(registry(), dsn, concurrency=2)):
        await wait_until(lambda: run_status(db, lonely) == "COMPLETED", what="lonely run")
        assert db.execute("SELECT count(*) FROM fairlane.waitpoints").fetchone() == (0,)
        # Waiting on a run that already finished makes its waitpoint, already complete.
        parents = [trigger(db, "parent", {"mode": "runs", "runs": [lonely]}) for _ in range(3)]
        for parent in parents:
            await wait_until(lambda p=parent: run_status(db, p) == "COMPLETED", what="parent")
    assert db.execute("SELECT count(*) FROM fairlane.waitpoints").fetchone() == (1,)
    for parent in parents:
        assert result_of(db, parent) == [{"ok": True, "output": 6, "error": None}]


async def test_runs_show_says_what_a_waiting_run_waits_on_and_tokens_have_a_cli(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tokens", "create", "--timeout", "1h", "--dsn", dsn]) == 0
    token = int(capsys.readouterr().out)
    assert main(["tokens", "show", str(token), "--dsn", dsn]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["id"], shown["status"]) == (token, "PENDING")
    assert shown["timeout_at"] is not None
    parent = trigger(db, "parent", {"mode": "token", "token": token})
    async with running(Worker(registry(), dsn)):
        await wait_until(lambda: run_status(db, parent) == "WAITING", what="waiting")
        assert main(["runs", "show", str(parent), "--dsn", dsn, "--json"]) == 0
        (waits,) = json.loads(capsys.readouterr().out)["waits_on"]
        assert (waits["kind"], waits["status"], waits["waitpoint_id"]) == (
            "MANUAL",
            "PENDING",
            token,
        )
        assert main(["tokens", "complete", str(token), '{"ok": 1}', "--dsn", dsn]) == 0
        assert "completed" in capsys.readouterr().out
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="resumed")
    assert main(["tokens", "complete", str(token), "--dsn", dsn]) == 0
    assert "already complete" in capsys.readouterr().out
    assert main(["tokens", "show", "999999", "--dsn", dsn]) == 3
