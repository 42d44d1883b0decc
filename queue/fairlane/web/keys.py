"""API keys: made, listed, revoked and checked. Only a key's SHA-256 is stored.

A key is ``fl_`` followed by 43 random URL-safe characters (256 bits from ``secrets``), shown
once when it is made. Because it is random and long, one SHA-256 is as good as a slow password
hash here: nothing can be guessed from the hash, and a lookup by hash costs one index probe.
An ``environment`` key sees and changes its own environment only; an ``admin`` key (no
environment) every environment, the scheduler's global settings, and the dashboard.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import psycopg

from fairlane.config import schema_name
from fairlane.engine import Engine, engine
from fairlane.engine.statement import Operation, drive, drive_async
from fairlane.errors import ApiKeyNotFoundError, ConfigurationError
from fairlane.models import ApiKey

KEY_PREFIX = "fl_"
# Characters of a key kept in clear to tell keys apart (the marker and 7 random ones).
SHOWN_CHARACTERS = 10
MAX_ENVIRONMENT_CHARS = 128


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _check_environment(environment: str | None, admin: bool) -> None:
    if admin:
        if environment is not None:
            raise ConfigurationError("an admin key belongs to no environment")
        return
    if (
        not isinstance(environment, str)
        or not environment
        or len(environment) > MAX_ENVIRONMENT_CHARS
        or "\x00" in environment
    ):
        raise ConfigurationError(
            f"an environment key needs an environment of 1 to {MAX_ENVIRONMENT_CHARS} characters"
        )


def _create(
    schema: str | None, environment: str | None, name: str | None, admin: bool
) -> Operation[tuple[ApiKey, str]]:
    _check_environment(environment, admin)
    key = new_key()
    found = yield engine(schema_name(schema)).web.create_key(
        "admin" if admin else "environment",
        environment,
        name,
        key[:SHOWN_CHARACTERS],
        key_hash(key),
    )
    return found[0], key


def _list(
    schema: str | None, environment: str | None, include_revoked: bool
) -> Operation[list[ApiKey]]:
    return (yield engine(schema_name(schema)).web.list_keys(environment, include_revoked))


def _revoke(schema: str | None, key_id: int, environment: str | None) -> Operation[ApiKey]:
    found = yield engine(schema_name(schema)).web.revoke_key(key_id, environment)
    if not found:
        raise ApiKeyNotFoundError(key_id)
    return found[0]  # type: ignore[no-any-return]


def _authenticate(source: Engine, presented: str) -> Operation[ApiKey | None]:
    if not presented.startswith(KEY_PREFIX) or len(presented) > 200:
        return None
    found = yield source.web.authenticate(key_hash(presented))
    return found[0] if found else None


Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]

# -- async, written once: the sync section below is generated from it ----------------------


async def create_key_async(
    conn: AsyncConn,
    environment: str | None,
    *,
    name: str | None = None,
    admin: bool = False,
    schema: str | None = None,
) -> tuple[ApiKey, str]:
    """A new key: its stored record, and the key itself (shown once, never stored)."""
    return await drive_async(conn, _create(schema, environment, name, admin))


async def list_keys_async(
    conn: AsyncConn,
    environment: str | None = None,
    *,
    include_revoked: bool = False,
    schema: str | None = None,
) -> list[ApiKey]:
    return await drive_async(conn, _list(schema, environment, include_revoked))


async def revoke_key_async(
    conn: AsyncConn, key_id: int, *, environment: str | None = None, schema: str | None = None
) -> ApiKey:
    """Revoke a key at once (a no-op on a revoked one), ending the dashboard sessions it
    opened; ``ApiKeyNotFoundError`` when no key has this id (in ``environment``, when given)."""
    return await drive_async(conn, _revoke(schema, key_id, environment))


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def create_key(
    conn: Conn,
    environment: str | None,
    *,
    name: str | None = None,
    admin: bool = False,
    schema: str | None = None,
) -> tuple[ApiKey, str]:
    """A new key: its stored record, and the key itself (shown once, never stored)."""
    return drive(conn, _create(schema, environment, name, admin))


def list_keys(
    conn: Conn,
    environment: str | None = None,
    *,
    include_revoked: bool = False,
    schema: str | None = None,
) -> list[ApiKey]:
    return drive(conn, _list(schema, environment, include_revoked))


def revoke_key(
    conn: Conn, key_id: int, *, environment: str | None = None, schema: str | None = None
) -> ApiKey:
    """Revoke a key at once (a no-op on a revoked one), ending the dashboard sessions it
    opened; ``ApiKeyNotFoundError`` when no key has this id (in ``environment``, when given)."""
    return drive(conn, _revoke(schema, key_id, environment))


# -- end of the generated sync section -------------------------------------------------------


# -- async only ------------------------------------------------------------------------------


async def authenticate_async(conn: AsyncConn, presented: str, *, schema: str) -> ApiKey | None:
    """The live key ``presented`` is, or None (unknown, malformed or revoked)."""
    return await drive_async(conn, _authenticate(engine(schema), presented))
