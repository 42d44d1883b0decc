"""Typed task handles: a dataclass (or pydantic) payload is validated at trigger and again
before the handler runs, results come back typed through ``trigger_and_wait``."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import psycopg
import pytest

from fairlane import AsyncClient, Client, RunContext, RunStatus, Task, TaskRegistry
from fairlane.codecs import DataclassCodec
from fairlane.errors import PayloadError, RunFailedError
from tests.helpers import fast_worker, run_row, run_status, running, statuses, wait_until

pytestmark = pytest.mark.anyio


class Channel(enum.Enum):
    EMAIL = "email"
    SMS = "sms"


@dataclass
class Line:
    sku: str
    quantity: int = 1


@dataclass
class Receipt:
    order: int
    email: str | None = None
    lines: list[Line] = field(default_factory=list)
    channel: Channel = Channel.EMAIL
    sent_at: datetime | None = None
    kind: Literal["sale", "refund"] = "sale"


@dataclass
class Sent:
    to: str
    lines: int


@pytest.fixture
async def client(dsn: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(dsn) as opened:
        yield opened


def _registry(seen: list[Any]) -> tuple[TaskRegistry, Task[Receipt, Sent], Task[int, str]]:
    tasks = TaskRegistry()

    @tasks.task(queue="mail")
    async def send_receipt(ctx: RunContext, payload: Receipt) -> Sent:
        seen.append(payload)
        if payload.email is None:
            raise ValueError("no address")
        return Sent(to=payload.email, lines=sum(line.quantity for line in payload.lines))

    @tasks.task()
    async def checkout(ctx: RunContext, payload: int) -> str:
        sent = await send_receipt.trigger_and_wait(
            ctx, Receipt(order=payload, email="a@example.com", lines=[Line("x", 2), Line("y")])
        )
        try:
            await send_receipt.trigger_and_wait(ctx, Receipt(order=payload), max_attempts=1)
        except RunFailedError as failed:
            message = failed.error and failed.error["message"]
            return f"{sent.to} {sent.lines} / {failed.status}: {message}"
        return "the second child should have failed"

    return tasks, send_receipt, checkout


async def test_a_dataclass_payload_round_trips(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    seen: list[Any] = []
    tasks, send_receipt, _ = _registry(seen)
    when = datetime(2024, 5, 1, 12, tzinfo=UTC)
    receipt = Receipt(
        order=42, email="b@example.com", lines=[Line("z", 3)], channel=Channel.SMS, sent_at=when
    )
    run_id = await send_receipt.trigger_async(client, receipt)
    stored = run_row(db, run_id)
    assert stored["queue"] == "mail"
    assert stored["payload"] == {
        "order": 42,
        "email": "b@example.com",
        "lines": [{"sku": "z", "quantity": 3}],
        "channel": "sms",
        "sent_at": "2024-05-01T12:00:00+00:00",
        "kind": "sale",
    }
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id).is_final, within=10, what="the run")
    assert seen == [receipt], "the handler got the dataclass back, nested ones included"
    assert run_row(db, run_id)["result"] == {"to": "b@example.com", "lines": 3}


async def test_trigger_and_wait_returns_the_typed_result_or_raises(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks, _, checkout = _registry([])
    run_id = await checkout.trigger_async(client, 7)
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id).is_final, within=20, what="the parent")
    row = run_row(db, run_id)
    assert row["status"] == RunStatus.COMPLETED
    assert row["result"] == "a@example.com 3 / FAILED: no address"


def test_a_bad_payload_is_refused_at_trigger(db: psycopg.Connection[Any], dsn: str) -> None:
    _, send_receipt, _ = _registry([])
    bad: list[Any] = [
        Receipt(order="42"),  # type: ignore[arg-type]  # a dataclass does not check its fields
        Receipt(order=1, lines=[Line("x", quantity=True)]),
        {"order": 1, "surprise": True},
        {"email": "no order"},
        Receipt(order=1, kind="gift"),  # type: ignore[arg-type]
    ]
    with Client(dsn) as client:
        for payload in bad:
            with pytest.raises(PayloadError, match="payload is not a valid Receipt"):
                send_receipt.trigger(client, payload)
        # A mapping that builds the dataclass is accepted (callers without types).
        accepted = send_receipt.trigger(client, {"order": 3, "lines": [{"sku": "a"}]})  # type: ignore[arg-type]
    assert statuses(db) == {"QUEUED": 1}
    assert run_row(db, accepted)["payload"]["lines"] == [{"sku": "a"}]


async def test_a_stored_payload_that_does_not_validate_fails_without_a_retry(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    seen: list[Any] = []
    failures: list[BaseException] = []

    async def on_failure(ctx: RunContext, error: BaseException) -> None:
        failures.append(error)

    tasks = TaskRegistry()

    @tasks.task(on_failure=on_failure)
    async def typed(ctx: RunContext, payload: Receipt) -> None:
        seen.append(payload)

    # Triggered by name, with no handle to check it: the worker refuses it.
    run_id = await client.trigger("typed", {"order": "not a number"}, max_attempts=5)
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id).is_final, within=10, what="the run")
    row = run_row(db, run_id)
    assert (row["status"], row["attempts"]) == ("FAILED", 1)
    assert row["error"]["code"] == "INVALID_PAYLOAD"
    assert "order: expected an integer" in row["error"]["message"]
    assert seen == []
    assert len(failures) == 1
    assert isinstance(failures[0], PayloadError)


def test_plain_annotations_have_no_codec() -> None:
    tasks = TaskRegistry()

    @tasks.task()
    def plain(ctx: RunContext, payload: dict[str, Any]) -> list[int]:
        return []

    @tasks.task()
    def unannotated(ctx, payload):  # type: ignore[no-untyped-def]
        return payload

    for handle in (plain, unannotated):
        assert handle.definition.payload_codec is None
        assert handle.definition.result_codec is None
        assert handle.encode({"anything": [1]}) == {"anything": [1]}


def test_calling_a_handle_calls_the_handler() -> None:
    tasks = TaskRegistry()

    @tasks.task()
    def add_one(ctx: RunContext, payload: int) -> int:
        return payload + 1

    assert add_one(None, 1) == 2  # type: ignore[arg-type]
    assert repr(add_one) == "Task('add_one')"
    assert isinstance(add_one.definition.payload_codec, type(None))
    assert DataclassCodec(Line).decode({"sku": "q"}) == Line("q")


async def test_a_pydantic_model_payload(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Order(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        order: int
        email: str | None = None

    seen: list[Any] = []
    tasks = TaskRegistry()

    @tasks.task()
    async def with_model(ctx: RunContext, payload: Order) -> Order:
        seen.append(payload)
        return payload

    with pytest.raises(PayloadError, match="payload is not a valid Order"):
        await with_model.trigger_async(client, {"order": "many"})  # type: ignore[arg-type]
    run_id = await with_model.trigger_async(client, Order(order=5, email="c@example.com"))
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id).is_final, within=10, what="the run")
    assert seen == [Order(order=5, email="c@example.com")]
    assert run_row(db, run_id)["result"] == {"order": 5, "email": "c@example.com"}
