"""The web app against the test's own database, driven through httpx (ASGITransport): keys
for two environments and an admin key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

pytest.importorskip("starlette")

from starlette.applications import Starlette

from fairlane.web import create_app
from fairlane.web.keys import create_key


@dataclass(frozen=True)
class Keys:
    a: str  # environment "env-a"
    b: str  # environment "env-b"
    admin: str


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keys(db: psycopg.Connection[Any]) -> Keys:
    return Keys(
        create_key(db, "env-a", name="a")[1],
        create_key(db, "env-b", name="b")[1],
        create_key(db, None, admin=True, name="admin")[1],
    )


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[Starlette]:
    app = create_app(dsn, "fairlane", pool_size=4, max_body_bytes=64 * 1024)
    try:
        yield app
    finally:
        await app.state.fairlane.close()


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


@pytest.fixture
async def as_a(app: Starlette, keys: Keys) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(app, keys.a) as client:
        yield client


@pytest.fixture
async def as_b(app: Starlette, keys: Keys) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(app, keys.b) as client:
        yield client


@pytest.fixture
async def as_admin(app: Starlette, keys: Keys) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(app, keys.admin) as client:
        yield client


def _client(app: Starlette, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers=bearer(key),
    )
