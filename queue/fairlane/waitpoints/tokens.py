"""Tokens: waitpoints that code completes by hand.

A handler waits on one with ``ctx.wait_for_token``; tokens are created and completed by any code
holding a connection, inside or outside a worker.
"""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane.config import schema_name
from fairlane.durations import Duration, seconds
from fairlane.engine import engine
from fairlane.engine.statement import Operation, drive, drive_async
from fairlane.errors import WaitpointNotFoundError
from fairlane.models import Token
from fairlane.payload import encode_json

DEFAULT_TOKEN_KEY_TTL_S = 30 * 24 * 3600.0


def _create(
    idempotency_key: str | None,
    idempotency_ttl: Duration | None,
    timeout: Duration | None,
    schema: str | None,
) -> Operation[int]:
    key_ttl_s = seconds("idempotency_ttl", idempotency_ttl) or DEFAULT_TOKEN_KEY_TTL_S
    statement = engine(schema_name(schema)).waits.create_token(
        idempotency_key, key_ttl_s, seconds("timeout", timeout)
    )
    found = yield statement
    return int(found[0])


def _complete(token_id: int, output: Any, schema: str | None) -> Operation[bool]:
    output_json = encode_json(output, what="token output")
    found = yield engine(schema_name(schema)).waits.complete_token(token_id, output_json)
    return bool(found)


def _get(token_id: int, schema: str | None) -> Operation[Token]:
    found = yield engine(schema_name(schema)).waits.get_token(token_id)
    if not found:
        raise WaitpointNotFoundError(token_id)
    return found[0]  # type: ignore[no-any-return]


# -- async, written once: the sync section below is generated from it ----------------------


async def get_token_async(
    conn: psycopg.AsyncConnection[Any], token_id: int, *, schema: str | None = None
) -> Token:
    """A token as it stands; ``WaitpointNotFoundError`` if there is no such token."""
    return await drive_async(conn, _get(token_id, schema))


async def create_token_async(
    conn: psycopg.AsyncConnection[Any],
    *,
    idempotency_key: str | None = None,
    idempotency_ttl: Duration | None = None,
    timeout: Duration | None = None,  # noqa: ASYNC109 - stored on the token
    schema: str | None = None,
) -> int:
    """A token for ``wait_for_token``; the same live idempotency key returns the same token."""
    return await drive_async(conn, _create(idempotency_key, idempotency_ttl, timeout, schema))


async def complete_token_async(
    conn: psycopg.AsyncConnection[Any],
    token_id: int,
    output: Any = None,
    *,
    schema: str | None = None,
) -> bool:
    """Complete a token and wake whoever waits on it; False if it was already complete.

    In a transaction, the waiting runs wake when it commits (with those of every token it
    completed, in one lock order: docs/concurrency.md)."""
    return await drive_async(conn, _complete(token_id, output, schema))


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def get_token(conn: psycopg.Connection[Any], token_id: int, *, schema: str | None = None) -> Token:
    """A token as it stands; ``WaitpointNotFoundError`` if there is no such token."""
    return drive(conn, _get(token_id, schema))


def create_token(
    conn: psycopg.Connection[Any],
    *,
    idempotency_key: str | None = None,
    idempotency_ttl: Duration | None = None,
    timeout: Duration | None = None,
    schema: str | None = None,
) -> int:
    """A token for ``wait_for_token``; the same live idempotency key returns the same token."""
    return drive(conn, _create(idempotency_key, idempotency_ttl, timeout, schema))


def complete_token(
    conn: psycopg.Connection[Any],
    token_id: int,
    output: Any = None,
    *,
    schema: str | None = None,
) -> bool:
    """Complete a token and wake whoever waits on it; False if it was already complete.

    In a transaction, the waiting runs wake when it commits (with those of every token it
    completed, in one lock order: docs/concurrency.md)."""
    return drive(conn, _complete(token_id, output, schema))


# -- end of the generated sync section -------------------------------------------------------
