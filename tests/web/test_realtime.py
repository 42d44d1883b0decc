"""Event streams (Server-Sent Events) through a real server: a run followed to completion, a
tag's and a batch's streams, realtime tokens allowed and refused, the tenant boundary, the
caps, and a stream's cleanup when its client goes."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import psycopg
import pytest
from starlette.applications import Starlette

from fairlane import RunContext, TaskRegistry, Worker
from fairlane.web import create_app
from fairlane.web.keys import create_key
from fairlane.web.realtime.inbox import Scope
from fairlane.web.realtime.settings import StreamSettings
from fairlane.web.realtime.tokens import TOKEN_SECRET, issue
from tests.helpers import running, wait_until
from tests.helpers.browser import live_server
from tests.helpers.sse import Event, events, until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

A, B = "env-a", "env-b"


@pytest.fixture
def app(dsn: str) -> Starlette:
    settings = StreamSettings(heartbeat_s=0.5, lifetime_s=60, per_environment=3)
    return create_app(dsn, "fairlane", pool_size=4, streams=settings)


@pytest.fixture
def url(app: Starlette) -> Iterator[str]:
    with live_server(app) as base:
        yield base


@pytest.fixture
def keys(db: psycopg.Connection[Any]) -> dict[str, str]:
    return {
        A: create_key(db, A, name="a")[1],
        B: create_key(db, B, name="b")[1],
        "admin": create_key(db, None, admin=True, name="admin")[1],
    }


@asynccontextmanager
async def client(url: str, key: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        yield http


@asynccontextmanager
async def stream(
    http: httpx.AsyncClient, path: str, **params: str
) -> AsyncIterator[AsyncIterator[Event]]:
    async with http.stream("GET", path, params=params) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield events(response)


async def trigger(http: httpx.AsyncClient, task: str = "t", **options: Any) -> int:
    answer = await http.post(f"/api/v1/tasks/{task}/trigger", json={"options": options})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["id"])


async def test_a_tag_stream_shows_its_environment_s_runs_as_they_appear_and_end(
    url: str, keys: dict[str, str]
) -> None:
    async with client(url, keys[A]) as a, client(url, keys[B]) as b:
        before = await trigger(a, tags=["t1"])
        async with stream(a, "/api/v1/tags/t1/events") as seen:
            first = await until(seen, "run")
            assert (first.data["id"], first.data["status"]) == (before, "QUEUED")
            theirs = await trigger(b, tags=["t1"])
            ours = await trigger(a, tags=["t1", "other"])
            appeared = await until(seen, "run")
            assert appeared.data["id"] == ours  # B's run, made first, never reaches A
            assert (await a.post(f"/api/v1/runs/{ours}/cancel")).status_code == 200
            changed = await until(seen, "status", id=ours)
            assert changed.data["status"] == "CANCELED"
            ended = await until(seen, "result", id=ours)
            assert ended.data["status"] == "CANCELED"
        assert theirs != ours


async def test_a_batch_stream_follows_the_batch_s_runs(
    url: str, keys: dict[str, str], dsn: str
) -> None:
    tasks = TaskRegistry()

    @tasks.task("t")
    async def t(ctx: RunContext, payload: Any) -> Any:
        return {"doubled": payload * 2}

    async with client(url, keys[A]) as a:
        batch = (await a.post("/api/v1/batches", json={"run_count": 2})).json()
        async with stream(a, f"/api/v1/batches/{batch['id']}/events") as seen:
            items = b'{"task": "t", "payload": 1}\n{"task": "t", "payload": 2}\n'
            sent = await a.post(f"/api/v1/batches/{batch['id']}/items", content=items)
            assert sent.status_code == 200, sent.text
            worker = Worker(tasks, dsn, environments=[A], poll_interval=0.05)
            async with running(worker):
                results: dict[int, Any] = {}
                while len(results) < 2:
                    done = await until(seen, "result")
                    results[done.data["id"]] = done.data["result"]
        assert sorted(value["doubled"] for value in results.values()) == [2, 4]


async def test_a_realtime_token_reads_its_run_and_nothing_else(
    url: str, keys: dict[str, str], db: psycopg.Connection[Any]
) -> None:
    async with client(url, keys[A]) as a, client(url, keys[B]) as b, client(url) as anonymous:
        mine, other = await trigger(a, tags=["x"]), await trigger(a)
        theirs = await trigger(b)
        made = await a.post("/api/v1/realtime-tokens", json={"run_id": mine, "lifetime": 60})
        assert made.status_code == 201, made.text
        token = made.json()["token"]
        assert made.json()["environment"] == A
        # B's run, named by A's key: as missing.
        hidden = await a.post("/api/v1/realtime-tokens", json={"run_id": theirs})
        assert hidden.status_code == 404
        assert hidden.json() == (
            await a.post("/api/v1/realtime-tokens", json={"run_id": 10**12})
        ).json() | {"error": {**hidden.json()["error"]}}
        async with stream(anonymous, f"/api/v1/runs/{mine}/events", access_token=token) as seen:
            assert (await until(seen, "run")).data["id"] == mine
        bearer = {"Authorization": f"Bearer {token}"}
        read = await anonymous.get(f"/api/v1/runs/{mine}", headers=bearer)
        assert read.status_code == 200
        assert read.json()["id"] == mine
        for path in (f"/api/v1/runs/{other}", f"/api/v1/runs/{other}/events"):
            assert (await anonymous.get(path, headers=bearer)).status_code == 403
        assert (await anonymous.get(f"/api/v1/runs/{theirs}", headers=bearer)).status_code == 404
        for method, path in (("GET", "/api/v1/runs"), ("POST", f"/api/v1/runs/{mine}/cancel")):
            answer = await anonymous.request(method, path, headers=bearer)
            assert answer.status_code == 401, (method, path)
        # An API key never travels in the query string.
        refused = await anonymous.get(f"/api/v1/runs/{mine}", params={"access_token": keys[A]})
        assert refused.status_code == 401
        forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
        assert (
            await anonymous.get(f"/api/v1/runs/{mine}", params={"access_token": forged})
        ).status_code == 401
        row = db.execute(
            "SELECT secret FROM fairlane.web_secrets WHERE name = %s", (TOKEN_SECRET,)
        ).fetchone()
        assert row is not None
        secret = bytes(row[0])
        expired = issue(secret, Scope("run", mine, A), 1, now=time.time() - 10).token
        answer = await anonymous.get(
            f"/api/v1/runs/{mine}/events", params={"access_token": expired}
        )
        assert answer.status_code == 401
        assert "expired" in answer.json()["error"]["message"]


async def test_tag_and_batch_tokens(url: str, keys: dict[str, str]) -> None:
    async with client(url, keys[A]) as a, client(url) as anonymous:
        tagged, untagged = await trigger(a, tags=["vip"]), await trigger(a)
        token = (await a.post("/api/v1/realtime-tokens", json={"tag": "vip"})).json()["token"]
        bearer = {"Authorization": f"Bearer {token}"}
        assert (await anonymous.get(f"/api/v1/runs/{tagged}", headers=bearer)).status_code == 200
        assert (await anonymous.get(f"/api/v1/runs/{untagged}", headers=bearer)).status_code == 403
        assert (await anonymous.get("/api/v1/tags/other/events", headers=bearer)).status_code == 403
        async with stream(anonymous, "/api/v1/tags/vip/events", once="1", access_token=token) as s:
            names = [event.name async for event in s]
        assert names == ["run", "end"]
        batch = (await a.post("/api/v1/batches", json={"run_count": 1})).json()
        made = await a.post("/api/v1/realtime-tokens", json={"batch_id": batch["id"]})
        assert made.status_code == 201
        assert made.json()["batch_id"] == batch["id"]
        for bad in (
            {},
            {"run_id": tagged, "tag": "vip"},
            {"tag": ""},
            {"run_id": "1"},
            {"run_id": tagged, "lifetime": 10**6},
            {"tag": "vip", "colour": 1},
        ):
            assert (await a.post("/api/v1/realtime-tokens", json=bad)).status_code == 422, bad


async def test_an_environment_key_cannot_follow_another_environment(
    url: str, keys: dict[str, str]
) -> None:
    async with client(url, keys[A]) as a, client(url, keys[B]) as b:
        theirs = await trigger(b, tags=["shared"])
        batch = (await b.post("/api/v1/batches", json={"run_count": 1})).json()
        missing_run = await a.get("/api/v1/runs/1000000000000/events")
        run = await a.get(f"/api/v1/runs/{theirs}/events")
        assert (run.status_code, run.json()) == (
            404,
            missing_run.json()
            | {
                "error": {
                    **missing_run.json()["error"],
                    "message": run.json()["error"]["message"],
                    "run_id": theirs,
                }
            },
        )
        assert (await a.get(f"/api/v1/batches/{batch['id']}/events")).status_code == 404
        named = await a.get("/api/v1/tags/shared/events", params={"environment": B})
        assert named.status_code == 403
        async with stream(a, "/api/v1/tags/shared/events", once="1") as seen:
            assert [event.name async for event in seen] == ["end"]


async def test_streams_are_capped_and_cleaned_up_when_their_clients_go(
    url: str, app: Starlette, keys: dict[str, str]
) -> None:
    state = app.state.fairlane
    async with client(url, keys[A]) as a, client(url, keys["admin"]) as admin:
        run = await trigger(a)
        async with anyio.create_task_group() as group:
            opened = anyio.Event()
            held = 0

            async def hold(done: anyio.Event) -> None:
                nonlocal held
                async with stream(a, f"/api/v1/runs/{run}/events") as seen:
                    await until(seen, "run")
                    held += 1
                    if held == 3:
                        opened.set()
                    await done.wait()

            done = anyio.Event()
            for _ in range(3):
                group.start_soon(hold, done)
            await opened.wait()
            assert (state.streams.open, state.dispatcher.subscribers) == (3, 3)
            full = await a.get(f"/api/v1/runs/{run}/events")
            assert full.status_code == 429
            assert full.headers["retry-after"] == "1"
            async with stream(admin, f"/api/v1/runs/{run}/events") as seen:
                assert (await until(seen, "comment")).data == "keep-alive"
            done.set()
        await wait_until(
            lambda: state.streams.open == 0 and state.dispatcher.subscribers == 0,
            what="every stream's place and inbox given back",
        )


async def test_the_run_page_follows_its_run_over_an_event_stream_under_the_session(
    url: str, keys: dict[str, str]
) -> None:
    async with client(url, keys[A]) as a, client(url) as browser:
        run = await trigger(a)
        assert (await browser.get(f"/runs/{run}/events")).status_code == 303  # no session
        form = await browser.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf
        signed = await browser.post(
            "/login", data={"csrf": csrf.group(1), "key": keys["admin"], "next": "/"}
        )
        assert signed.status_code == 303
        page = await browser.get(f"/runs/{run}")
        assert f'data-events="/runs/{run}/events"' in page.text
        async with stream(browser, f"/runs/{run}/events") as seen:
            assert (await until(seen, "run")).data["id"] == run
            assert (await a.post(f"/api/v1/runs/{run}/cancel")).status_code == 200
            assert (await until(seen, "status")).data["status"] == "CANCELED"
            assert (await until(seen, "end")).data == {"reason": "final"}
        assert (await browser.get("/runs/1000000000000/events")).status_code == 404
