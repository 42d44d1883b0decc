"""Checked by mypy (``make lint``, and tests/unit/test_typing.py), never run: the payload and
result types of typed task handles, asserted with ``typing.assert_type``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_type

import psycopg

from fairlane import AsyncClient, Client, RunContext, Task, TaskRegistry

tasks = TaskRegistry()


@dataclass
class Receipt:
    order: int
    email: str | None = None


@dataclass
class Sent:
    to: str


@tasks.task(queue="mail")
async def send_receipt(ctx: RunContext, payload: Receipt) -> Sent:
    return Sent(to=payload.email or "nobody")


@tasks.task()
def count_rows(ctx: RunContext, payload: dict[str, Any]) -> int:
    return len(payload)


@tasks.task()
async def no_result(ctx: RunContext, payload: None) -> None:
    return None


assert_type(send_receipt, Task[Receipt, Sent])
assert_type(count_rows, Task[dict[str, Any], int])
assert_type(no_result, Task[None, None])


def trigger_sync(conn: psycopg.Connection[Any], client: Client) -> None:
    assert_type(send_receipt.trigger(conn, Receipt(order=42)), int)
    assert_type(send_receipt.trigger(client, Receipt(order=42), priority=5), int)
    assert_type(count_rows.trigger(client, {"a": 1}), int)


async def trigger_async(conn: psycopg.AsyncConnection[Any], client: AsyncClient) -> None:
    assert_type(await send_receipt.trigger_async(conn, Receipt(order=42)), int)
    assert_type(await send_receipt.trigger_async(client, Receipt(order=1)), int)


@tasks.task()
async def checkout(ctx: RunContext, payload: Receipt) -> str:
    sent = await send_receipt.trigger_and_wait(ctx, Receipt(order=payload.order))
    assert_type(sent, Sent)
    rows = await count_rows.trigger_and_wait(ctx, {"order": payload.order})
    assert_type(rows, int)
    return sent.to
