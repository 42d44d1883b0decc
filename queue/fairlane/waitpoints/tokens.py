"""Tokens: waitpoints that code completes by hand.

A handler waits on one with ``ctx.wait_for_token``; tokens are created and completed by any code
holding a connection, inside or outside a worker.
"""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane.config import schema_name
from fairlane.durations import Duration, seconds
from fairlane.engine.sqlfiles import query
from fairlane.payload import encode_json

DEFAULT_TOKEN_KEY_TTL_S = 30 * 24 * 3600.0


def _token_params(
    idempotency_key: str | None, idempotency_ttl: Duration | None,
    timeout: Duration | None,
) -> dict[str, Any]:  # fmt: skip
    return {
        "key": idempotency_key,
        "key_ttl_s": seconds("idempotency_ttl", idempotency_ttl) or DEFAULT_TOKEN_KEY_TTL_S,
        "timeout_s": seconds("timeout", timeout),
    }


def create_token(
    conn: psycopg.Connection[Any],
    *,
    idempotency_key: str | None = None,
    idempotency_ttl: Duration | None = None,
    timeout: Duration | None = None,
    schema: str | None = None,
) -> int:
    """A token for ``wait_for_token``; the same live idempotency key returns the same token."""
    params = _token_params(idempotency_key, idempotency_ttl, timeout)
    row = conn.execute(query("create_token", schema_name(schema)), params).fetchone()
    assert row is not None  # a function call returns one row
    return int(row[0])


def complete_token(
    conn: psycopg.Connection[Any], token_id: int, output: Any = None, *, schema: str | None = None
) -> bool:
    """Complete a token and wake whoever waits on it; False if it was already complete."""
    params = {"id": token_id, "output": encode_json(output, what="token output")}
    return conn.execute(query("complete_token", schema_name(schema)), params).fetchone() is not None


async def create_token_async(
    conn: psycopg.AsyncConnection[Any],
    *,
    idempotency_key: str | None = None,
    idempotency_ttl: Duration | None = None,
    timeout: Duration | None = None,  # noqa: ASYNC109 - stored on the token
    schema: str | None = None,
) -> int:
    params = _token_params(idempotency_key, idempotency_ttl, timeout)
    cursor = await conn.execute(query("create_token", schema_name(schema)), params)
    row = await cursor.fetchone()
    assert row is not None  # a function call returns one row
    return int(row[0])


async def complete_token_async(
    conn: psycopg.AsyncConnection[Any], token_id: int, output: Any = None, *,
    schema: str | None = None,
) -> bool:  # fmt: skip
    params = {"id": token_id, "output": encode_json(output, what="token output")}
    cursor = await conn.execute(query("complete_token", schema_name(schema)), params)
    return await cursor.fetchone() is not None
