"""Tokens, batches and limits through the JSON API; the OpenAPI document; mounting."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route

from fairlane.web.api import openapi
from tests.web.conftest import Keys, bearer

pytestmark = pytest.mark.anyio


# -- tokens ----------------------------------------------------------------------------------


async def test_token_callback_completes_without_a_key(
    as_a: httpx.AsyncClient,
    as_b: httpx.AsyncClient,
    http: httpx.AsyncClient,
    db: psycopg.Connection[Any],
) -> None:
    made = await as_a.post("/api/v1/tokens", json={"timeout": "1h", "idempotency_key": "k"})
    assert made.status_code == 201, made.text
    token = made.json()
    assert (token["status"], token["environment"]) == ("PENDING", "env-a")
    assert token["callback_url"].startswith(f"http://testserver/api/v1/tokens/{token['id']}/")
    same = (await as_a.post("/api/v1/tokens", json={"idempotency_key": "k"})).json()
    other = (await as_b.post("/api/v1/tokens", json={"idempotency_key": "k"})).json()
    assert same["id"] == token["id"]
    assert same["callback_url"] == token["callback_url"]
    assert other["id"] != token["id"]
    assert (await as_b.get(f"/api/v1/tokens/{token['id']}")).status_code == 404
    assert (await as_b.post(f"/api/v1/tokens/{token['id']}/complete")).status_code == 404

    path = token["callback_url"].removeprefix("http://testserver")
    forged = path[:-4] + "0000"
    assert (await http.post(forged, json={"ok": True})).status_code == 401
    assert (
        await http.post(path.replace(f"/{token['id']}/", f"/{other['id']}/"), json=1)
    ).status_code == 401
    done = await http.post(path, json={"approved": True})
    assert done.json() == {"id": token["id"], "completed": True}
    again = await http.post(path, json={"approved": False})
    assert again.json()["completed"] is False
    read = (await as_a.get(f"/api/v1/tokens/{token['id']}")).json()
    assert (read["status"], read["output"]) == ("COMPLETED", {"approved": True})

    completed = await as_b.post(f"/api/v1/tokens/{other['id']}/complete", json={"output": 7})
    assert completed.json()["completed"] is True


# -- batches ---------------------------------------------------------------------------------


def _lines(*items: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


async def _stream(data: bytes, size: int = 7) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_batch_in_two_phases_with_a_bad_line_and_a_resend(
    as_a: httpx.AsyncClient, as_b: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    made = await as_a.post("/api/v1/batches", json={"run_count": 4})
    assert made.status_code == 201, made.text
    batch = made.json()
    assert (batch["environment"], batch["status"], batch["sealed"]) == ("env-a", "PENDING", False)
    items = f"/api/v1/batches/{batch['id']}/items"
    first = _lines({"task": "t", "payload": 0}, {"task": "t", "payload": 1})
    bad = first + b"{not json\n" + _lines({"task": "t", "payload": 3})
    answer = await as_a.post(
        items, content=_stream(bad), headers={"Content-Type": "application/x-ndjson"}
    )
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert (error["type"], error["line"], error["index"]) == ("BatchLineError", 3, 2)
    assert (await as_b.post(items, content=b"")).status_code == 404
    kept = (await as_a.get(f"/api/v1/batches/{batch['id']}")).json()
    assert (kept["received"], kept["status"], kept["sealed"]) == (2, "PENDING", False)
    resend = _lines({"task": "t", "payload": 2}, {"task": "t", "payload": 3})
    # A resend from the bad line on (its index is the error's); then of everything: the
    # items already in are deduplicated by index.
    done = await as_a.post(items + "?first_index=2", content=_stream(resend))
    assert done.status_code == 200, done.text
    assert (done.json()["accepted"], done.json()["received"]) == (2, 4)
    assert done.json()["sealed"] is True
    again = await as_a.post(items, content=_stream(first + resend))
    assert (again.json()["accepted"], again.json()["received"]) == (0, 4)
    page = (await as_a.get(items, params={"limit": 3})).json()
    assert [item["index"] for item in page["data"]] == [0, 1, 2]
    assert page["next_after_index"] == 2
    assert (await as_b.get(f"/api/v1/batches/{batch['id']}")).status_code == 404


async def test_an_oversized_line_becomes_a_pre_failed_item(
    as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    db.execute("UPDATE fairlane.settings SET value = '1024' WHERE name = 'batch_item_max_bytes'")
    batch = (await as_a.post("/api/v1/batches", json={"runCount": 2})).json()
    data = _lines({"task": "big", "payload": "x" * 5000}, {"task": "t"})
    answer = await as_a.post(f"/api/v1/batches/{batch['id']}/items", content=_stream(data, 100))
    assert answer.status_code == 200, answer.text
    assert (answer.json()["accepted"], answer.json()["oversized"]) == (2, 1)


async def test_batch_creation_refusals(as_a: httpx.AsyncClient, as_b: httpx.AsyncClient) -> None:
    too_many = await as_a.post("/api/v1/batches", json={"run_count": 0})
    assert too_many.status_code == 422
    parent = (await as_b.post("/api/v1/tasks/t/trigger")).json()["id"]
    hidden = await as_a.post("/api/v1/batches", json={"run_count": 1, "parent_run_id": parent})
    assert hidden.status_code == 404
    refused = await as_a.post("/api/v1/batches", json={"run_count": 1, "environment": "env-b"})
    assert refused.status_code == 403


# -- limits ----------------------------------------------------------------------------------


async def test_limits_read_set_pause_resume(as_a: httpx.AsyncClient) -> None:
    fresh = (await as_a.get("/api/v1/environments/env-a/limits")).json()
    assert fresh == {
        "environment": "env-a",
        "concurrency_limit": None,
        "burst_factor": 1.0,
        "cap": None,
        "size_limit": None,
        "paused": False,
    }
    changed = await as_a.put(
        "/api/v1/environments/env-a/limits",
        json={"concurrency_limit": 10, "burst_factor": 1.5, "size_limit": 100},
    )
    assert changed.json()["cap"] == 15
    kept = await as_a.put("/api/v1/environments/env-a/limits", json={"size_limit": None})
    assert (kept.json()["concurrency_limit"], kept.json()["size_limit"]) == (10, None)
    assert (await as_a.post("/api/v1/environments/env-a/pause")).json()["paused"] is True
    assert (await as_a.post("/api/v1/environments/env-a/resume")).json()["paused"] is False
    queue = "/api/v1/environments/env-a/queues/mail"
    assert (await as_a.get(queue + "/limits")).json()["concurrency_limit"] is None
    assert (await as_a.put(queue + "/limits", json={"concurrency_limit": 2})).json()[
        "concurrency_limit"
    ] == 2
    assert (await as_a.post(queue + "/pause")).json()["paused"] is True
    rows = (await as_a.get("/api/v1/limits")).json()["queues"]
    assert [(r["queue"], r["queue_paused"], r["environment_cap"]) for r in rows] == [
        ("mail", True, 15)
    ]
    bad = await as_a.put(queue + "/limits", json={"concurrency_limit": -1})
    assert (bad.status_code, bad.json()["error"]["setting"]) == (422, "concurrency_limit")
    unknown = await as_a.put(queue + "/limits", json={"burst_factor": 2})
    assert unknown.status_code == 422
    paused = await as_a.put(queue + "/limits", json={"paused": "yes"})
    assert paused.status_code == 422


async def test_a_queues_total_limit_and_busiest_keys(
    as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    from fairlane import TriggerRequest, trigger_many

    queue = "/api/v1/environments/env-a/queues/mail"
    changed = await as_a.put(queue + "/limits", json={"concurrency_limit": 1, "total_limit": 5})
    assert (changed.json()["concurrency_limit"], changed.json()["total_limit"]) == (1, 5)
    trigger_many(
        db,
        [
            TriggerRequest("t", environment="env-a", queue="mail", concurrency_key=key)
            for key in ("a", "a", "b")
        ],
    )
    keys = await as_a.get(queue + "/keys", params={"top": "1"})
    assert keys.json() == {"keys": [{"concurrency_key": "a", "running": 0, "queued": 2}]}
    assert (await as_a.get(queue + "/keys", params={"top": "0"})).status_code == 422


async def test_a_queues_rate_per_key(as_a: httpx.AsyncClient) -> None:
    queue = "/api/v1/environments/env-a/queues/mail"
    body = {"rate_limit": 10, "rate_period_s": 60, "rate_burst": 2}
    changed = await as_a.put(queue + "/limits", json=body)
    assert changed.status_code == 200, changed.text
    assert {k: changed.json()[k] for k in body} == body
    shown = await as_a.get(queue + "/limits")
    assert {k: shown.json()[k] for k in body} == body
    for bad in ({"rate_limit": 0}, {"rate_limit": 5, "rate_period_s": -1}, {"rate_burst": 3}):
        refused = await as_a.put(queue + "/limits", json=bad)
        assert refused.status_code == 422, bad
    assert (await as_a.get(queue + "/limits")).json()["rate_limit"] == 10
    off = await as_a.put(queue + "/limits", json={"rate_limit": None})
    assert off.json()["rate_limit"] is None


async def test_scheduler_settings_need_an_admin_key(as_admin: httpx.AsyncClient) -> None:
    changed = await as_admin.put("/api/v1/scheduler", json={"quantum": 5, "rate_limit_per_s": 100})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["quantum"], changed.json()["rate_limit_per_s"]) == (5, 100)
    off = await as_admin.put("/api/v1/scheduler", json={"rate_limit_per_s": None})
    assert off.json()["rate_limit_per_s"] is None
    bad = await as_admin.put("/api/v1/scheduler", json={"quantum": "many"})
    assert bad.status_code == 422


# -- OpenAPI, unknown routes, mounting ---------------------------------------------------------


def _api_paths(routes: list[BaseRoute]) -> set[tuple[str, str]]:
    found = set()
    for route in routes:
        assert isinstance(route, Route)
        path = re.sub(r":\w+}", "}", route.path)  # {id:bigint} is documented as {id}
        for method in route.methods or ():
            if method != "HEAD":
                found.add((path, method.lower()))
    return found


async def test_openapi_documents_every_route(http: httpx.AsyncClient) -> None:
    answer = await http.get("/api/v1/openapi.json")
    assert answer.status_code == 200
    document = answer.json()
    assert document["openapi"].startswith("3.")
    assert document["servers"] == [{"url": "http://testserver/api/v1"}]
    documented = {
        (path, method) for path, operations in document["paths"].items() for method in operations
    }
    from fairlane.web.api import routes

    assert documented == _api_paths(routes())
    assert openapi.document()["components"]["schemas"]["Error"]


async def test_unknown_paths_and_methods_answer_json(as_a: httpx.AsyncClient) -> None:
    missing = await as_a.get("/api/v1/nothing")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "NotFound"
    wrong = await as_a.delete("/api/v1/runs")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["type"] == "MethodNotAllowed"
    assert (await as_a.get("/api/v1/runs/abc")).status_code == 404
    assert (await as_a.get(f"/api/v1/runs/{2**70}")).status_code == 404


async def test_mounted_inside_another_app(app: Starlette, keys: Keys) -> None:
    host = Starlette(routes=[Mount("/jobs", app=app)])
    transport = httpx.ASGITransport(app=host)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://example.org", headers=bearer(keys.a)
    ) as client:
        run_id = (await client.post("/jobs/api/v1/tasks/t/trigger")).json()["id"]
        assert (await client.get(f"/jobs/api/v1/runs/{run_id}")).json()["id"] == run_id
        token = (await client.post("/jobs/api/v1/tokens")).json()
        assert token["callback_url"].startswith("http://example.org/jobs/api/v1/tokens/")
        path = token["callback_url"].removeprefix("http://example.org")
        assert (await client.post(path, json=1)).json()["completed"] is True
        spec = (await client.get("/jobs/api/v1/openapi.json")).json()
        assert spec["servers"] == [{"url": "http://example.org/jobs/api/v1"}]


async def test_items_stream_through_in_flat_memory(
    as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """20,000 items of 1 KB (20 MB) sent in 64 KB chunks: the server holds a slice at a time,
    never the body."""
    import tracemalloc

    count = 20_000
    db.execute(
        "UPDATE fairlane.settings SET value = %s WHERE name IN ('batch_max_items', "
        "'batch_bucket_max', 'batch_refill_amount')",
        (str(count),),
    )
    batch = (await as_a.post("/api/v1/batches", json={"run_count": count})).json()
    line = json.dumps({"task": "t", "payload": {"blob": "x" * 1000}}).encode() + b"\n"

    async def body() -> AsyncIterator[bytes]:
        chunk = line * (64 * 1024 // len(line))
        sent = 0
        while sent < count:
            take = min(count - sent, 64 * 1024 // len(line))
            yield chunk if take * len(line) == len(chunk) else line * take
            sent += take

    tracemalloc.start()
    try:
        answer = await as_a.post(f"/api/v1/batches/{batch['id']}/items", content=body())
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status_code == 200, answer.text
    assert (answer.json()["accepted"], answer.json()["sealed"]) == (count, True)
    assert peak < 6 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB for a 20 MB body"


async def test_an_unreachable_database_answers_503(keys: Keys) -> None:
    from fairlane.web import create_app

    app = create_app("postgresql://127.0.0.1:1/nothing?connect_timeout=1", "fairlane")
    app.state.fairlane.pool_timeout = 1.0
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://testserver",
            headers=bearer(keys.a),
        ) as client:
            answer = await client.get("/api/v1/runs")
        assert answer.status_code == 503
        assert answer.json()["error"]["type"] == "DatabaseUnavailable"
    finally:
        await app.state.fairlane.close()
