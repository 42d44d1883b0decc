"""Steps (``ctx.step``): each runs once per run across replays and failed attempts, its result
recorded under the lease; a replay that asks for another call than the recorded one fails the
run (fairlane.worker.replay, docs/durable-execution.md)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import psycopg
import pytest
from prometheus_client import generate_latest

from fairlane import Client, RunContext, TaskRegistry, trigger
from fairlane.cli.main import main
from fairlane.retry import Backoff
from fairlane.waitpoints import complete_token, create_token
from tests.helpers import fast_worker, run_row, run_status, running, wait_until

pytestmark = pytest.mark.anyio

FAST = Backoff(min_s=0.01, max_s=0.02)


def steps_of(db: psycopg.Connection[Any], run_id: int) -> list[tuple[Any, ...]]:
    query = (
        "SELECT position, kind, name, status, result FROM fairlane.run_steps"
        " WHERE run_id = %s ORDER BY position"
    )
    return db.execute(query, (run_id,)).fetchall()


async def test_steps_run_once_across_a_wait_that_let_go_of_the_worker(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    ledger: Counter[str] = Counter()
    tasks = TaskRegistry()

    def charge(amount: int) -> dict[str, int]:
        ledger["charge"] += 1
        return {"charged": amount}

    async def ship() -> str:
        ledger["ship"] += 1
        return "shipped"

    @tasks.task("order")
    async def order(ctx: RunContext, payload: dict[str, int]) -> object:
        charged = await ctx.step("charge", charge, payload["amount"])
        approval = await ctx.wait_for_token(payload["token"])
        shipped = await ctx.step("ship", ship)
        return [charged, approval.output, shipped]

    token = create_token(db)
    run_id = trigger(db, "order", {"amount": 5, "token": token})
    worker = fast_worker(tasks, dsn, wait_in_memory_s=0)
    signals = worker.enable_test_signals()
    async with running(worker):
        await signals.detached.wait_for(run_id)
        row = run_row(db, run_id)
        # The waiting run holds nothing: no lease, no worker, no handler in the worker.
        assert (row["status"], row["lease_token"], row["worker_id"]) == ("WAITING", None, None)
        assert run_id not in worker.held
        complete_token(db, token, {"approved": True})
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="resumed")
    row = run_row(db, run_id)
    assert row["result"] == [{"charged": 5}, {"approved": True}, "shipped"]
    # The replay served the first step from its record; the resume counted no attempt.
    assert ledger == Counter({"charge": 1, "ship": 1})
    assert row["attempts"] == 1
    assert worker.stats.detached == 1
    assert worker.stats.replays == 1
    assert worker.stats.steps_replayed == 1
    assert worker.stats.steps_executed == 2
    assert steps_of(db, run_id) == [
        (0, "STEP", "charge", "COMPLETED", {"charged": 5}),
        (1, "WAIT", "wait_for_token", "WAITING", None),
        (2, "STEP", "ship", "COMPLETED", "shipped"),
    ]


@pytest.mark.parametrize("per_attempt", [False, True])
async def test_completed_steps_survive_a_failed_attempt_unless_per_attempt(
    dsn: str, db: psycopg.Connection[Any], per_attempt: bool
) -> None:
    ledger: Counter[str] = Counter()
    tasks = TaskRegistry()

    def reserve() -> int:
        ledger["reserve"] += 1
        return ledger["reserve"]

    @tasks.task("flaky", backoff=FAST, max_attempts=2)
    async def flaky(ctx: RunContext, payload: None) -> object:
        reserved = await ctx.step("reserve", reserve, per_attempt=per_attempt)
        if ctx.attempt == 1:
            raise RuntimeError("after the step")
        return reserved

    run_id = trigger(db, "flaky", None)
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="retried")
    assert ledger["reserve"] == (2 if per_attempt else 1)
    assert run_row(db, run_id)["result"] == ledger["reserve"]


async def test_a_failing_step_is_recorded_and_runs_again_on_the_retry(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    ledger: Counter[str] = Counter()
    tasks = TaskRegistry()

    def call_api() -> str:
        ledger["call"] += 1
        if ledger["call"] == 1:
            raise ConnectionError("api down")
        return "ok"

    @tasks.task("caller", backoff=FAST, max_attempts=2)
    async def caller(ctx: RunContext, payload: None) -> object:
        return await ctx.step("call_api", call_api)

    run_id = trigger(db, "caller", None)
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="retried")
    assert ledger["call"] == 2
    assert steps_of(db, run_id) == [(0, "STEP", "call_api", "COMPLETED", "ok")]
    row = run_row(db, run_id)
    assert row["attempts"] == 2
    assert "api down" in row["attempt_errors"]["attempts"][0]["error"]["message"]


async def test_a_replay_asking_for_another_call_fails_the_run_naming_both(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    flavour = {"name": "first"}
    tasks = TaskRegistry()

    @tasks.task("drifting", max_attempts=3)
    async def drifting(ctx: RunContext, payload: dict[str, int]) -> object:
        await ctx.step(flavour["name"], lambda: 1)
        await ctx.wait_for_token(payload["token"])
        return "done"

    token = create_token(db)
    run_id = trigger(db, "drifting", {"token": token})
    worker = fast_worker(tasks, dsn, wait_in_memory_s=0)
    signals = worker.enable_test_signals()
    async with running(worker):
        await signals.detached.wait_for(run_id)
        # The handler's code changed while its run waited.
        flavour["name"] = "second"
        complete_token(db, token, None)
        await wait_until(lambda: run_status(db, run_id) == "FAILED", what="mismatch")
    error = run_row(db, run_id)["error"]
    assert error["code"] == "REPLAY_MISMATCH"
    assert error["type"] == "fairlane.errors.ReplayMismatchError"
    assert "position 0" in error["message"]
    assert "recorded step 'first'" in error["message"]
    assert "asked for step 'second'" in error["message"]
    # Not retried: the record would be met again.
    assert run_row(db, run_id)["attempts"] == 1


async def test_a_step_in_place_of_a_recorded_wait_is_a_mismatch(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    order = {"wait_first": True}
    tasks = TaskRegistry()

    @tasks.task("swapped")
    async def swapped(ctx: RunContext, payload: dict[str, int]) -> object:
        if order["wait_first"]:
            await ctx.wait_for_token(payload["token"])
        await ctx.step("work", lambda: 2)
        return "done"

    token = create_token(db)
    run_id = trigger(db, "swapped", {"token": token})
    worker = fast_worker(tasks, dsn, wait_in_memory_s=0)
    signals = worker.enable_test_signals()
    async with running(worker):
        await signals.detached.wait_for(run_id)
        order["wait_first"] = False
        complete_token(db, token, None)
        await wait_until(lambda: run_status(db, run_id) == "FAILED", what="mismatch")
    message = run_row(db, run_id)["error"]["message"]
    assert "recorded wait 'wait_for_token', asked for step 'work'" in message


async def test_a_step_result_that_is_not_json_fails_the_attempt(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("opaque", max_attempts=1)
    async def opaque(ctx: RunContext, payload: None) -> object:
        return await ctx.step("opaque", lambda: object())

    run_id = trigger(db, "opaque", None)
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id) == "FAILED", what="failed")
    assert steps_of(db, run_id)[0][:4] == (0, "STEP", "opaque", "FAILED")
    assert "step 'opaque' result" in run_row(db, run_id)["error"]["message"]


async def test_runs_show_client_and_metrics_list_the_recorded_calls(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("visible")
    async def visible(ctx: RunContext, payload: None) -> object:
        total = await ctx.step("sum", sum, [1, 2, 3])
        # Long enough to be let go of first: the replay is counted.
        await ctx.wait_until(0.3)
        return total

    run_id = trigger(db, "visible", None)
    worker = fast_worker(tasks, dsn, wait_in_memory_s=0)
    async with running(worker):
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="done")
    with Client(dsn) as client:
        steps = client.steps(run_id)
    assert [(s.position, s.kind, s.name, s.status, s.result) for s in steps] == [
        (0, "STEP", "sum", "COMPLETED", 6),
        (1, "WAIT", "wait_until", "COMPLETED", [None]),
    ]
    # Both ended: the step when its result was written, the wait when its time came.
    assert all(s.finished_at is not None and s.finished_at >= s.started_at for s in steps)
    assert main(["runs", "show", str(run_id), "--dsn", dsn]) == 0
    shown = capsys.readouterr().out
    assert "steps and waits" in shown
    assert "  0 step sum  completed  attempt 1" in shown
    assert "  1 wait wait_until" in shown
    assert main(["runs", "show", str(run_id), "--dsn", dsn, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [step["name"] for step in document["steps"]] == ["sum", "wait_until"]
    exposed = generate_latest(worker.metrics.registry).decode()
    assert 'fairlane_worker_steps_total{how="executed"} 1.0' in exposed
    assert "fairlane_worker_replays_total 1.0" in exposed
    assert "fairlane_worker_detached_waits_total 1.0" in exposed
