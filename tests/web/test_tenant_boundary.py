"""The tenant boundary, tried as a hostile tenant would: two environments, each with its own
API key, against a real ``fairlane serve`` and a real worker that serves environment A only.

Tenant A knows the ids of B's run, batch and token (ids are sequential) and tries every way in
to reach them; each attempt must answer exactly as for an id that does not exist, and must
change nothing of B's. B's objects are made through B's own key, as B would make them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, TriggerRequest, Worker
from fairlane.web.keys import create_key
from tests.helpers import run_row, running, wait_until
from tests.helpers.serve import serve

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MISSING = 10**12  # an id nothing has
A, B = "env-a", "env-b"


@pytest.fixture
def server(dsn: str) -> Iterator[str]:
    """``fairlane serve`` on the test's database, in a process of its own."""
    with serve(dsn) as served:
        yield served.url


@pytest.fixture
async def tenants(
    server: str, db: psycopg.Connection[Any]
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """(A's client, B's client), each with its own environment's key."""
    key_a, key_b = create_key(db, A, name="a")[1], create_key(db, B, name="b")[1]
    async with (
        httpx.AsyncClient(base_url=server, headers=_bearer(key_a), timeout=30) as a,
        httpx.AsyncClient(base_url=server, headers=_bearer(key_b), timeout=30) as b,
    ):
        yield a, b


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def tasks() -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task("noop")
    async def noop(ctx: RunContext, payload: Any) -> Any:
        return payload

    @registry.task("fan_out")
    async def fan_out(ctx: RunContext, payload: Any) -> Any:
        one = await ctx.trigger_and_wait("noop", 1)
        many = await ctx.batch_trigger_and_wait(
            [TriggerRequest("noop", 2), TriggerRequest("noop", 3)]
        )
        return [one.output, [result.output for result in many]]

    @registry.task("escape")
    async def escape(ctx: RunContext, payload: Any) -> Any:
        return (await ctx.trigger_and_wait("noop", 1, environment=payload)).output

    @registry.task("escape_batch")
    async def escape_batch(ctx: RunContext, payload: Any) -> Any:
        results = await ctx.batch_trigger_and_wait([TriggerRequest("noop", environment=payload)])
        return [result.output for result in results]

    @registry.task("wait_run")
    async def wait_run(ctx: RunContext, payload: int) -> Any:
        return [result.output for result in await ctx.wait_for_runs([payload])]

    @registry.task("wait_batch")
    async def wait_batch(ctx: RunContext, payload: int) -> Any:
        return [result.output for result in await ctx.wait_for_batch(payload)]

    @registry.task("wait_token")
    async def wait_token(ctx: RunContext, payload: int) -> Any:
        return (await ctx.wait_for_token(payload)).output

    return registry


def worker_of_a(dsn: str) -> Worker:
    """A real worker serving environment A only."""
    return Worker(tasks(), dsn, environments=[A], poll_interval=0.05, periodic_interval=0.05)


def run_not_found(run_id: int) -> dict[str, Any]:
    """The body of a 404 for a run that does not exist."""
    message = f"run {run_id} does not exist"
    return {"error": {"type": "RunNotFoundError", "message": message, "run_id": run_id}}


async def trigger(client: httpx.AsyncClient, task: str, **body: Any) -> int:
    answer = await client.post(f"/api/v1/tasks/{task}/trigger", json=body)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["id"])


async def batch_of(client: httpx.AsyncClient, *lines: dict[str, Any]) -> int:
    """A batch of ``lines``, streamed as NDJSON through the client's key."""
    made = await client.post("/api/v1/batches", json={"run_count": len(lines)})
    assert made.status_code == 201, made.text
    batch_id = int(made.json()["id"])
    body = "".join(json.dumps(line) + "\n" for line in lines)
    ingested = await client.post(f"/api/v1/batches/{batch_id}/items", content=body.encode())
    assert ingested.status_code == 200, ingested.text
    return batch_id


async def finished_items(client: httpx.AsyncClient, batch_id: int) -> list[dict[str, Any]]:
    """The batch's items once every one was decided."""

    async def decided() -> bool:
        items = (await client.get(f"/api/v1/batches/{batch_id}/items")).json()["data"]
        return all(item["state"] != "PENDING" for item in items)

    await wait_until(decided, what=f"the items of batch {batch_id}")
    return list((await client.get(f"/api/v1/batches/{batch_id}/items")).json()["data"])


def runs_of(db: psycopg.Connection[Any], environment: str) -> list[tuple[Any, ...]]:
    query = "SELECT task, status FROM fairlane.runs WHERE environment = %s ORDER BY id"
    return db.execute(query, (environment,)).fetchall()


async def test_the_batch_carrier_cannot_be_triggered_by_a_tenant(
    dsn: str, db: psycopg.Connection[Any], tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    a, b = tenants
    b_batch = await batch_of(b, {"task": "noop", "payload": "b's"})
    attack = {"payload": {"batch_id": b_batch, "index": 0}}
    probe = {"payload": {"batch_id": MISSING, "index": 0}}
    async with running(worker_of_a(dsn)):
        refused = await a.post("/api/v1/tasks/fairlane.batch_item/trigger", json=attack)
        missing = await a.post("/api/v1/tasks/fairlane.batch_item/trigger", json=probe)
        many = await a.post(
            "/api/v1/tasks/trigger-many",
            json={"items": [{"task": "noop"}, {"task": "fairlane.batch_item", **attack}]},
        )
        carriers_queue = await a.post(
            "/api/v1/tasks/noop/trigger", json={"options": {"queue": "__batches__"}}
        )
        # The same request as an item of A's own batch: the item fails, nothing else.
        own = await batch_of(a, {"task": "fairlane.batch_item", **attack})
        (item,) = await finished_items(a, own)
    assert refused.status_code == 422
    assert refused.json()["error"]["type"] == "ReservedNameError"
    assert refused.json()["error"]["option"] == "task"
    # Whether B's batch exists is not told: the answer is the same as for no batch at all.
    assert refused.json() == missing.json()
    assert (many.status_code, many.json()["error"]["index"]) == (422, 1)
    assert carriers_queue.status_code == 422
    assert carriers_queue.json()["error"]["option"] == "queue"
    assert item["state"] == "FAILED"
    assert item["error"]["code"] == "BATCH_ITEM_COULD_NOT_TRIGGER"
    assert "reserved" in item["error"]["message"]
    # B's item is still waiting for B's own carrier, and B has no run but that carrier.
    state = db.execute(
        "SELECT state, run_id FROM fairlane.batch_items WHERE batch_id = %s", (b_batch,)
    ).fetchone()
    assert state == ("PENDING", None)
    assert runs_of(db, B) == [("fairlane.batch_item", "QUEUED")]
    assert ("noop", "COMPLETED") not in runs_of(db, A), "trigger-many is all or nothing"


async def test_the_carrier_serves_only_batches_of_its_own_environment(
    dsn: str, db: psycopg.Connection[Any], tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    """Defence in depth: a carrier run in A naming B's batch (as if one had got past the
    trigger's check) treats B's item exactly like an item that does not exist."""
    a, b = tenants
    b_batch = await batch_of(b, {"task": "noop", "payload": "b's"})
    # A batch of A's own makes A's carrier queue, as any first batch does.
    assert (await a.post("/api/v1/batches", json={"run_count": 1})).status_code == 201
    forged = []
    for batch_id in (b_batch, MISSING):
        row = db.execute(
            "INSERT INTO fairlane.runs (environment, queue, task, payload, status) "
            "VALUES (%s, '__batches__', 'fairlane.batch_item', %s, 'QUEUED') RETURNING id",
            (A, json.dumps({"batch_id": batch_id, "index": 0})),
        ).fetchone()
        assert row is not None
        forged.append(row[0])
    async with running(worker_of_a(dsn)):
        for run_id in forged:
            await wait_until(
                lambda run_id=run_id: run_row(db, run_id)["status"] == "COMPLETED",
                what="the forged carrier",
            )
    assert [run_row(db, run_id)["result"] for run_id in forged] == [
        {"skipped": "no such item"},
        {"skipped": "no such item"},
    ]
    state = db.execute(
        "SELECT state, run_id FROM fairlane.batch_items WHERE batch_id = %s", (b_batch,)
    ).fetchone()
    assert state == ("PENDING", None)
    assert runs_of(db, B) == [("fairlane.batch_item", "QUEUED")]


async def test_no_way_in_names_another_environments_run_as_parent(
    dsn: str, db: psycopg.Connection[Any], tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    a, b = tenants
    b_run = await trigger(b, "noop", options={"delay": "1h"})
    async with running(worker_of_a(dsn)):
        single = await a.post(
            "/api/v1/tasks/noop/trigger", json={"options": {"parent_run_id": b_run}}
        )
        missing = await a.post(
            "/api/v1/tasks/noop/trigger", json={"options": {"parent_run_id": MISSING}}
        )
        many = await a.post(
            "/api/v1/tasks/trigger-many",
            json={"items": [{"task": "noop", "options": {"parentRunId": b_run}}]},
        )
        own = await batch_of(
            a,
            {"task": "noop", "options": {"parent_run_id": b_run}},
            {"task": "noop", "options": {"parent_run_id": MISSING}},
        )
        items = await finished_items(a, own)
    assert (single.status_code, single.json()) == (404, run_not_found(b_run))
    assert (missing.status_code, missing.json()) == (404, run_not_found(MISSING))
    assert (many.status_code, many.json()) == (404, run_not_found(b_run))
    assert [(item["state"], item["error"]) for item in items] == [
        ("FAILED", {"code": "BATCH_ITEM_COULD_NOT_TRIGGER", "message": f"run {run} does not exist"})
        for run in (b_run, MISSING)
    ]
    children = db.execute("SELECT count(*) FROM fairlane.runs WHERE parent_run_id = %s", (b_run,))
    assert children.fetchone() == (0,)
    # B cancelling its run (and its children) reaches nothing of A's.
    canceled = await b.post(f"/api/v1/runs/{b_run}/cancel")
    assert canceled.status_code == 200, canceled.text
    assert ("noop", "CANCELED") not in runs_of(db, A)


async def test_a_handlers_children_stay_in_its_environment(
    dsn: str, db: psycopg.Connection[Any], tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    a, _b = tenants
    async with running(worker_of_a(dsn)):
        fan_out = await trigger(a, "fan_out")
        escapes = [
            await trigger(a, task, payload=B, options={"max_attempts": 1})
            for task in ("escape", "escape_batch")
        ]
        # The worker serves A only: the children run only if they are A's.
        await wait_until(
            lambda: run_row(db, fan_out)["status"] == "COMPLETED", what="the parent", within=60
        )
        for run_id in escapes:
            await wait_until(
                lambda run_id=run_id: run_row(db, run_id)["status"] == "FAILED",
                what="the escape",
            )
    assert run_row(db, fan_out)["result"] == [1, [2, 3]]
    children = db.execute(
        "SELECT DISTINCT environment FROM fairlane.runs WHERE parent_run_id = %s", (fan_out,)
    ).fetchall()
    assert children == [(A,)]
    for run_id in escapes:
        assert run_row(db, run_id)["error"]["type"] == "fairlane.errors.ForeignEnvironmentError"
    assert runs_of(db, B) == []
    assert db.execute("SELECT count(*) FROM fairlane.batches").fetchone() == (1,)


async def test_a_handler_cannot_wait_on_another_environments_run_batch_or_token(
    dsn: str, db: psycopg.Connection[Any], tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    a, b = tenants
    b_run = await trigger(b, "noop", payload="b's")
    db.execute(
        "UPDATE fairlane.runs SET status = 'COMPLETED', result = '\"b secret\"' WHERE id = %s",
        (b_run,),
    )
    b_parent = await trigger(b, "noop", options={"delay": "1h"})
    made = await b.post("/api/v1/batches", json={"run_count": 1, "parent_run_id": b_parent})
    b_batch = int(made.json()["id"])
    b_token = int((await b.post("/api/v1/tokens", json={})).json()["id"])
    targets = {"wait_run": b_run, "wait_batch": b_batch, "wait_token": b_token}
    async with running(worker_of_a(dsn)):
        waiters = {
            task: [
                await trigger(a, task, payload=target, options={"max_attempts": 1})
                for target in (foreign, MISSING)
            ]
            for task, foreign in targets.items()
        }
        for run_id in [run_id for pair in waiters.values() for run_id in pair]:
            await wait_until(
                lambda run_id=run_id: run_row(db, run_id)["status"] == "FAILED",
                what="the wait refused",
            )
    for task, (foreign, missing) in waiters.items():
        refused, absent = run_row(db, foreign)["error"], run_row(db, missing)["error"]
        # The error of an id that does not exist, naming the id asked for.
        assert refused["type"] == absent["type"], task
        expected = absent["message"].replace(str(MISSING), str(targets[task]))
        assert refused["message"] == expected, task
    assert "b secret" not in json.dumps(
        [run_row(db, run_id) for pair in waiters.values() for run_id in pair], default=str
    )
    assert (await b.get(f"/api/v1/tokens/{b_token}")).json()["status"] == "PENDING"


async def test_another_environments_token_answers_as_a_missing_one(
    tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = tenants
    b_token = int((await b.post("/api/v1/tokens", json={})).json()["id"])
    for token_id in (b_token, MISSING):
        read = await a.get(f"/api/v1/tokens/{token_id}")
        completed = await a.post(f"/api/v1/tokens/{token_id}/complete", json={"output": 1})
        expected = {
            "type": "TokenNotFoundError",
            "message": f"waitpoint {token_id} does not exist",
            "waitpoint_id": token_id,
        }
        assert (read.status_code, read.json()["error"]) == (404, expected)
        assert (completed.status_code, completed.json()["error"]) == (404, expected)
    assert (await b.get(f"/api/v1/tokens/{b_token}")).json()["status"] == "PENDING"


@pytest.mark.parametrize(
    ("options", "option"),
    [
        pytest.param({"idempotency_scope": "bogus"}, "idempotency_scope", id="scope"),
        pytest.param({"idempotencyKeyScope": 7}, "idempotency_scope", id="scope-number"),
        pytest.param({"idempotency_ttl": "forever"}, "idempotency_ttl", id="key-ttl"),
        pytest.param({"parent_attempt": 0}, "parent_attempt", id="parent-attempt"),
    ],
)
async def test_an_option_is_validated_without_the_option_it_refines(
    db: psycopg.Connection[Any],
    tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
    options: dict[str, Any],
    option: str,
) -> None:
    a, _b = tenants
    answer = await a.post("/api/v1/tasks/noop/trigger", json={"options": options})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["option"] == option
    assert runs_of(db, A) == []


async def test_bulk_actions_never_reach_another_environments_runs(
    db: psycopg.Connection[Any], tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    """A bulk retry or cancel by A, with every filter that names B's runs (B's environment,
    B's batch, B's idempotency key, B's tag), or none at all, leaves B's runs as they were."""
    a, b = tenants
    theirs = [
        await trigger(b, "noop", options={"idempotencyKey": "order-1", "tags": ["vip"]}),
        await trigger(b, "noop", options={"tags": ["vip"]}),
    ]
    their_batch = await batch_of(b, {"task": "noop", "payload": 1})
    mine = await trigger(a, "noop", options={"tags": ["vip"]})
    db.execute("UPDATE fairlane.runs SET status = 'FAILED' WHERE id = ANY(%s)", [[*theirs, mine]])
    before = runs_of(db, B)

    for action in ("retry", "cancel"):
        named = await a.post(f"/api/v1/runs/{action}", params={"environment": B})
        assert named.status_code == 403, named.text
        for params in (
            {"batch_id": str(their_batch)},
            {"idempotency_key": "order-1"},
            {"tag": "vip", "status": "QUEUED"},
        ):
            dry = await a.post(f"/api/v1/runs/{action}", params={**params, "dry_run": "true"})
            assert dry.json()["matching"] == 0, (action, params)
            done = await a.post(f"/api/v1/runs/{action}", params=params)
            assert done.json()["matched"] == 0, (action, params)
    everything = await a.post("/api/v1/runs/retry", params={"all": "true"})
    assert everything.json() == {"matched": 1, "changed": 1, "unchanged": {}}
    assert run_row(db, mine)["status"] == "QUEUED"
    assert runs_of(db, B) == before


async def test_a_tenant_never_sees_another_environments_concurrency_keys(
    tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    """Both tenants key runs in a queue of the same name. A lists its own keys only; asking for
    B's answers as for a queue B does not have, naming no key; and A's key opens no dashboard
    session, so no queue page of B's either."""
    a, b = tenants
    for _ in range(2):
        await trigger(b, "noop", options={"queue": "mail", "concurrencyKey": "b-secret"})
    await trigger(a, "noop", options={"queue": "mail", "concurrencyKey": "a-own"})
    mine = await a.get(f"/api/v1/environments/{A}/queues/mail/keys")
    assert mine.json() == {"keys": [{"concurrency_key": "a-own", "running": 0, "queued": 1}]}
    theirs = await b.get(f"/api/v1/environments/{B}/queues/mail/keys")
    assert theirs.json() == {"keys": [{"concurrency_key": "b-secret", "running": 0, "queued": 2}]}

    refused = await a.get(f"/api/v1/environments/{B}/queues/mail/keys", params={"top": "100"})
    nothing = await a.get(f"/api/v1/environments/{B}/queues/none/keys", params={"top": "100"})
    assert refused.status_code == 403
    assert (refused.status_code, refused.json()) == (nothing.status_code, nothing.json())
    assert "b-secret" not in refused.text
    page = await a.get("/queue", params={"environment": B, "queue": "mail"})
    assert page.status_code == 303
    assert page.headers["location"].startswith("/login?next=")
    assert "b-secret" not in page.text
