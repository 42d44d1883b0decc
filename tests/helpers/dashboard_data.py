"""A small, lived-in database for the dashboard's browser tests: three environments, several
queues, runs that really ran through a worker (completed with results, failed with a
traceback, retried), runs held by a lease, queued and delayed runs, a parent with children,
two batches (one done with a failed item, one still receiving)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anyio
import psycopg

from fairlane import TaskRegistry
from fairlane.batches import AsyncBatchClient
from fairlane.models import ClaimedRun
from fairlane.triggering.api import trigger_many, trigger_many_async
from fairlane.triggering.request import TriggerRequest
from fairlane.worker import RunContext
from fairlane.worker.lease_store import Completion, Lease, LeaseStore
from tests.helpers import fast_worker
from tests.helpers.batches import ndjson, set_setting


class CardDeclinedError(Exception):
    pass


@dataclass(frozen=True)
class Seeded:
    completed: int  # a run with a result
    failed: int  # a run that failed its last attempt
    parent: int  # a completed run with children
    executing: ClaimedRun  # held by a lease: the test completes it
    batch_done: int
    batch_open: int


def _registry() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("emails.send_welcome")
    async def send_welcome(ctx: RunContext, payload: Any) -> Any:
        return {"delivered": True, "message_id": f"msg-{ctx.run_id:06d}"}

    @tasks.task("billing.charge_card", dont_retry_on=CardDeclinedError)
    async def charge_card(ctx: RunContext, payload: Any) -> Any:
        if payload["amount_cents"] > 50_000:
            raise CardDeclinedError(f"card ending {payload['card']} declined: insufficient funds")
        return {"charged": payload["amount_cents"], "currency": "EUR"}

    @tasks.task("reports.generate")
    async def generate(ctx: RunContext, payload: Any) -> Any:
        ctx.set_metadata(rows=1284, format=payload["format"])
        return {"url": f"s3://reports/{payload['name']}.{payload['format']}", "rows": 1284}

    @tasks.task("images.resize")
    async def resize(ctx: RunContext, payload: Any) -> Any:
        return {"width": payload["width"], "height": payload["width"] * 3 // 4}

    return tasks


def _history() -> list[TriggerRequest]:
    """Runs a worker takes through to the end."""
    requests = [
        TriggerRequest(
            "emails.send_welcome",
            {"user_id": 1000 + n, "locale": "en"},
            environment="acme",
            queue="mail",
            tags=["signup"],
        )
        for n in range(14)
    ]
    requests += [
        TriggerRequest(
            "billing.charge_card",
            {"amount_cents": amount, "card": f"{4000 + n}"},
            environment="globex",
            queue="billing",
            tags=["billing", "eu"],
        )
        for n, amount in enumerate([1999, 4999, 72000, 1250, 990, 88000, 3100])
    ]
    requests += [
        TriggerRequest(
            "reports.generate",
            {"name": f"weekly-{n}", "format": "csv"},
            environment="acme",
            queue="reports",
            tags=["weekly"],
        )
        for n in range(4)
    ]
    requests += [
        TriggerRequest(
            "images.resize", {"key": f"uploads/{n}.jpg", "width": 640}, environment="initech"
        )
        for n in range(9)
    ]
    return requests


def _user(n: int) -> str:
    """A concurrency key per user, a few users far busier than the rest."""
    return "user-1" if n < 12 else "user-2" if n < 18 else f"user-{n}"


def _waiting_work() -> list[TriggerRequest]:
    """Runs left queued or delayed, for the overview's counts (acme/mail's with keys, for its
    queue page)."""
    requests = [
        TriggerRequest(
            "emails.send_welcome",
            {"user_id": 2000 + n},
            environment="acme",
            queue="mail",
            tags=["signup"],
            concurrency_key=_user(n),
        )
        for n in range(23)
    ]
    requests += [
        TriggerRequest(
            "reports.generate",
            {"name": f"monthly-{n}", "format": "pdf"},
            environment="acme",
            queue="reports",
            delay="2h",
        )
        for n in range(3)
    ]
    requests += [
        TriggerRequest(
            "billing.charge_card",
            {"amount_cents": 1500 + n, "card": "4242"},
            environment="globex",
            queue="billing",
            priority=5,
        )
        for n in range(8)
    ]
    return requests


async def _batches(dsn: str) -> tuple[int, int]:
    async with AsyncBatchClient(dsn) as client:
        done = await client.create("initech", 6)
        items = [
            {"task": "images.resize", "payload": {"key": f"batch/{n}.jpg", "width": 320}}
            for n in range(5)
        ]
        lines = (
            ndjson(items)
            + json.dumps({"task": "images.resize", "payload": {"blob": "x" * 4096}}).encode()
            + b"\n"
        )

        async def chunks(data: bytes) -> Any:
            yield data

        await client.ingest(done.id, chunks(lines))
        still_open = await client.create("acme", 40)
        await client.ingest(
            still_open.id,
            chunks(
                ndjson(
                    [
                        {"task": "emails.send_welcome", "payload": {"user_id": 3000 + n}}
                        for n in range(15)
                    ]
                )
            ),
        )
    return done.id, still_open.id


async def _seed(dsn: str) -> Seeded:
    with psycopg.connect(dsn, autocommit=True) as db:
        # Small enough that the 4 KiB line of the first batch is refused as too large.
        set_setting(db, "batch_item_max_bytes", 2048)
        ids = trigger_many(db, _history())
        parent = ids[0]
        trigger_many(
            db,
            [
                TriggerRequest(
                    "images.resize",
                    {"key": f"avatar/{n}.png", "width": 128},
                    environment="acme",
                    queue="mail",
                    parent_run_id=parent,
                )
                for n in range(3)
            ],
        )
    batch_done, batch_open = await _batches(dsn)
    worker = fast_worker(_registry(), dsn, concurrency=8)
    await worker.run_until_idle()
    store = LeaseStore("fairlane", lease_seconds=600, worker_id="dashboard-test")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # The runs claimed here are the only ones queued: the claim takes exactly them.
        held = await trigger_many_async(
            conn,
            [
                TriggerRequest(
                    "reports.generate",
                    {"name": "quarterly", "format": "xlsx"},
                    environment="acme",
                    queue="reports",
                    tags=["finance"],
                ),
                TriggerRequest(
                    "images.resize",
                    {"key": "uploads/big.tiff", "width": 4096},
                    environment="initech",
                ),
            ],
        )
        claimed = await store.claim(conn, 10)
        assert sorted(run.id for run in claimed) == sorted(held), claimed
        await trigger_many_async(conn, _waiting_work())
    with psycopg.connect(dsn, autocommit=True) as db:
        failed = db.execute(
            "SELECT id FROM fairlane.runs WHERE status = 'FAILED' ORDER BY id LIMIT 1"
        ).fetchone()
    assert failed is not None
    return Seeded(
        completed=ids[1],
        failed=int(failed[0]),
        parent=parent,
        executing=next(run for run in claimed if run.task == "reports.generate"),
        batch_done=batch_done,
        batch_open=batch_open,
    )


def seed(dsn: str) -> Seeded:
    return anyio.run(_seed, dsn)


def complete(dsn: str, run: ClaimedRun, result: Any) -> None:
    """Complete a claimed run as its worker would: the fenced statement, with its lease."""

    async def write() -> set[int]:
        store = LeaseStore("fairlane", lease_seconds=600, worker_id="dashboard-test")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await store.complete(
                conn, [Completion(Lease(run.id, run.lease_token), json.dumps(result))]
            )

    assert anyio.run(write) == {run.id}
