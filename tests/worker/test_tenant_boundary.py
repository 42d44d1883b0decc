"""The tenant boundary through every library way in: a request names only objects of its own
environment, and names under ``fairlane.`` are the engine's (docs/security.md).

Environment B owns a run; whatever the way in, a request of environment A that names it as
its parent is refused exactly as one naming a run that does not exist, and nothing is written.
The same check is made by the trigger statements themselves, so a request that skipped every
Python check is refused too.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, pool
from sqlalchemy.orm import Session

from fairlane import (
    AsyncClient,
    Client,
    RunContext,
    TaskRegistry,
    TriggerRequest,
    Worker,
    trigger,
    trigger_async,
    trigger_many,
)
from fairlane.cli import main as cli_main
from fairlane.config import sqlalchemy_url
from fairlane.engine.sqlfiles import query
from fairlane.errors import (
    ForeignEnvironmentError,
    InvalidDurationError,
    ReservedNameError,
    RunNotFoundError,
    TriggerOptionError,
)
from fairlane.testing import eager
from fairlane.triggering.boundary import FOREIGN_PARENT_SQLSTATE, RESERVED_NAME_SQLSTATE
from tests.helpers import run_row, run_status, running, wait_until

pytestmark = pytest.mark.anyio

A, B = "env-a", "env-b"
MISSING = 10**12


@pytest.fixture
def b_run(db: psycopg.Connection[Any]) -> int:
    return trigger(db, "work", environment=B, delay="1h")


def runs_of(db: psycopg.Connection[Any], environment: str) -> int:
    row = db.execute("SELECT count(*) FROM fairlane.runs WHERE environment = %s", (environment,))
    return int((row.fetchone() or (0,))[0])


def refusals(call: Any, b_run: int) -> list[str]:
    """The messages ``call(parent)`` raises for B's run and for a missing run, each of them a
    ``RunNotFoundError`` naming the run."""
    messages = []
    for parent in (b_run, MISSING):
        with pytest.raises(RunNotFoundError) as raised:
            call(parent)
        assert raised.value.run_id == parent
        messages.append(str(raised.value).replace(str(parent), "<id>"))
    return messages


def test_the_client_and_create_failed_run(
    dsn: str, db: psycopg.Connection[Any], b_run: int
) -> None:
    with Client(dsn) as client:
        assert (
            refusals(lambda p: client.trigger("t", environment=A, parent_run_id=p), b_run)
            == ["run <id> does not exist"] * 2
        )
        keyed = refusals(
            lambda p: client.trigger("t", environment=A, parent_run_id=p, idempotency_key="k"),
            b_run,
        )
        assert keyed == ["run <id> does not exist"] * 2
        requests = [TriggerRequest("t", environment=A), TriggerRequest("t", environment=A)]
        many = refusals(
            lambda p: client.trigger_many(
                [requests[0], TriggerRequest("t", environment=A, parent_run_id=p)]
            ),
            b_run,
        )
        assert many == ["run <id> does not exist"] * 2
        failed = refusals(
            lambda p: client.create_failed_run(
                "t", code="X", message="m", environment=A, parent_run_id=p
            ),
            b_run,
        )
        assert failed == ["run <id> does not exist"] * 2
        # A parent of the request's own environment is taken.
        own = client.trigger("t", environment=B, parent_run_id=b_run)
        assert client.get_run(own).parent_run_id == b_run
    assert runs_of(db, A) == 0


async def test_the_async_client(dsn: str, db: psycopg.Connection[Any], b_run: int) -> None:
    async with AsyncClient(dsn) as client:
        for parent in (b_run, MISSING):
            with pytest.raises(RunNotFoundError, match=f"run {parent} does not exist"):
                await client.trigger("t", environment=A, parent_run_id=parent)
    assert runs_of(db, A) == 0


def test_in_the_callers_transaction(dsn: str, db: psycopg.Connection[Any], b_run: int) -> None:
    with psycopg.connect(dsn) as conn:

        def in_transaction(parent: int) -> None:
            try:
                trigger(conn, "t", environment=A, parent_run_id=parent)
            finally:
                # The refused statement aborted the caller's transaction, as any failed one.
                conn.rollback()

        assert refusals(in_transaction, b_run) == ["run <id> does not exist"] * 2
        requests = [TriggerRequest("t", environment=A, parent_run_id=b_run)]
        with pytest.raises(RunNotFoundError):
            trigger_many(conn, requests)
        conn.rollback()
    engine = create_engine(sqlalchemy_url(dsn), poolclass=pool.NullPool)
    try:
        for parent in (b_run, MISSING):
            with Session(engine) as session, pytest.raises(RunNotFoundError):
                trigger(session, "t", environment=A, parent_run_id=parent)
    finally:
        engine.dispose()
    assert runs_of(db, A) == 0


async def test_in_the_callers_async_transaction(
    dsn: str, db: psycopg.Connection[Any], b_run: int
) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        with pytest.raises(RunNotFoundError, match=f"run {b_run} does not exist"):
            await trigger_async(conn, "t", environment=A, parent_run_id=b_run)
    assert runs_of(db, A) == 0


@pytest.mark.parametrize(
    ("options", "option"),
    [
        pytest.param({"task": "fairlane.batch_item"}, "task", id="carrier-task"),
        pytest.param({"task": "fairlane.anything"}, "task", id="reserved-prefix"),
        pytest.param({"task": "t", "queue": "__batches__"}, "queue", id="carrier-queue"),
    ],
)
def test_reserved_names_are_refused_on_every_way_in(
    dsn: str, db: psycopg.Connection[Any], options: dict[str, Any], option: str
) -> None:
    payload = {"batch_id": 1, "index": 0}
    with Client(dsn) as client:
        with pytest.raises(ReservedNameError) as raised:
            client.trigger(payload=payload, **options)
        assert raised.value.option == option
        with pytest.raises(ReservedNameError):
            client.create_failed_run(code="X", message="m", **options)
    with psycopg.connect(dsn) as conn, pytest.raises(ReservedNameError):
        trigger(conn, payload=payload, **options)
    assert db.execute("SELECT count(*) FROM fairlane.runs").fetchone() == (0,)


def test_the_cli_refuses_the_carrier_task(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    payload = json.dumps({"batch_id": 1, "index": 0})
    assert cli_main(["trigger", "--dsn", dsn, "fairlane.batch_item", payload]) == 2
    assert "reserved" in capsys.readouterr().err
    assert db.execute("SELECT count(*) FROM fairlane.runs").fetchone() == (0,)


@pytest.mark.parametrize("name", ["insert_runs", "trigger_keyed_runs"])
def test_the_trigger_statements_enforce_the_rule_themselves(
    db: psycopg.Connection[Any], b_run: int, name: str
) -> None:
    """Requests that skipped every Python check (written as JSON by hand) are refused by the
    statement: the one place the rule is enforced."""
    key = {"idempotency_key": "k"} if name == "trigger_keyed_runs" else {}
    statement = query(name, "fairlane")
    refused = [
        ({"task": "t", "environment": A, "parent_run_id": b_run, **key}, FOREIGN_PARENT_SQLSTATE),
        ({"task": "t", "environment": A, "parent_run_id": MISSING, **key}, FOREIGN_PARENT_SQLSTATE),
        ({"task": "fairlane.batch_item", "environment": A, **key}, RESERVED_NAME_SQLSTATE),
        ({"task": "t", "queue": "__batches__", **key}, RESERVED_NAME_SQLSTATE),
    ]
    for request, sqlstate in refused:
        with pytest.raises(psycopg.Error) as raised:
            db.execute(statement, {"runs": json.dumps([{"task": "ok"}, request])})
        assert raised.value.sqlstate == sqlstate
    assert runs_of(db, A) == 0
    assert db.execute("SELECT count(*) FROM fairlane.runs").fetchone() == (1,)


def test_a_user_task_cannot_take_a_reserved_name() -> None:
    tasks = TaskRegistry()
    with pytest.raises(ReservedNameError):
        tasks.register("fairlane.mine", lambda ctx, payload: None)


@pytest.mark.parametrize(
    ("options", "error", "option"),
    [
        pytest.param(
            {"idempotency_scope": "bogus"}, TriggerOptionError, "idempotency_scope", id="scope"
        ),
        pytest.param(
            {"idempotency_scope": None}, TriggerOptionError, "idempotency_scope", id="scope-none"
        ),
        pytest.param(
            {"idempotency_ttl": "forever"}, InvalidDurationError, "idempotency_ttl", id="ttl"
        ),
        pytest.param(
            {"idempotency_ttl": -1}, TriggerOptionError, "idempotency_ttl", id="ttl-negative"
        ),
    ],
)
def test_an_option_is_validated_without_the_option_it_refines(
    dsn: str,
    db: psycopg.Connection[Any],
    options: dict[str, Any],
    error: type[Exception],
    option: str,
) -> None:
    with Client(dsn) as client, pytest.raises(error) as raised:
        client.trigger("t", **options)
    assert isinstance(raised.value, TriggerOptionError)
    assert raised.value.option == option
    assert db.execute("SELECT count(*) FROM fairlane.runs").fetchone() == (0,)


def eager_tasks() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("child")
    async def child(ctx: RunContext, payload: Any) -> str:
        return ctx.environment

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: Any) -> Any:
        one = await ctx.trigger_and_wait("child")
        many = await ctx.batch_trigger_and_wait([TriggerRequest("child")])
        return [one.output, many[0].output]

    @tasks.task("escape")
    async def escape(ctx: RunContext, payload: str) -> Any:
        return (await ctx.trigger_and_wait("child", environment=payload)).output

    return tasks


NOWHERE = "postgresql://127.0.0.1:9/nowhere?connect_timeout=2"


async def test_eager_children_inherit_their_parents_environment() -> None:
    with eager(eager_tasks()) as runs:
        async with AsyncClient(NOWHERE) as client:
            parent = await client.wait_for_run(await client.trigger("parent", environment=A))
            escape = await client.wait_for_run(
                await client.trigger("escape", B, environment=A, max_attempts=1)
            )
            same = await client.wait_for_run(await client.trigger("escape", A, environment=A))
    assert parent.result == [A, A]
    assert [run.environment for run in runs if run.task == "child"] == [A, A, A]
    assert escape.error is not None
    assert escape.error["type"] == f"{ForeignEnvironmentError.__module__}.ForeignEnvironmentError"
    assert same.result == A


async def test_a_batch_child_naming_a_foreign_parent_fails_alone(
    dsn: str, db: psycopg.Connection[Any], b_run: int
) -> None:
    """In ``batch_trigger_and_wait``, a request naming another environment's run as its
    parent becomes a pre-failed item, as one naming a missing run; the others run."""
    tasks = TaskRegistry()

    @tasks.task("child")
    async def child(ctx: RunContext, payload: int) -> int:
        return payload

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: int) -> Any:
        requests = [
            TriggerRequest("child", 1, parent_run_id=payload),
            TriggerRequest("child", 2, parent_run_id=MISSING),
            TriggerRequest("child", 3),
        ]
        results = await ctx.batch_trigger_and_wait(requests)
        return [
            r.output if r.ok else (r.error or {}).get("error", {}).get("message") for r in results
        ]

    worker = Worker(tasks, dsn, environments=[A], poll_interval=0.05, periodic_interval=0.05)
    async with AsyncClient(dsn) as client, running(worker):
        run_id = await client.trigger("parent", b_run, environment=A)
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="the parent")
    assert run_row(db, run_id)["result"] == [
        f"run {b_run} does not exist",
        f"run {MISSING} does not exist",
        3,
    ]
    children = db.execute("SELECT count(*) FROM fairlane.runs WHERE parent_run_id = %s", (b_run,))
    assert children.fetchone() == (0,)
