"""Keys: no key or a bad one is 401, a key sees its own environment only (another's ids are
404), admin keys see all; revocation is immediate; bodies are bounded; keys never reach a
log."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from starlette.applications import Starlette

from fairlane.web.keys import key_hash, list_keys, revoke_key
from tests.web.conftest import Keys, bearer

pytestmark = pytest.mark.anyio


async def _run(client: httpx.AsyncClient, **options: Any) -> int:
    answer = await client.post("/api/v1/tasks/t/trigger", json={"options": options})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["id"])


async def test_no_key_a_malformed_header_and_a_bad_key_are_401(
    http: httpx.AsyncClient, keys: Keys
) -> None:
    for headers in (
        {},
        {"Authorization": keys.a},
        {"Authorization": "Basic abc"},
        bearer(""),
        bearer("fl_" + "x" * 43),
        bearer("not-a-key"),
        bearer(keys.a + "x"),
    ):
        for method, path in (
            ("GET", "/api/v1/runs"),
            ("POST", "/api/v1/tasks/t/trigger"),
            ("GET", "/api/v1/runs/1"),
            ("GET", "/api/v1/limits"),
        ):
            answer = await http.request(method, path, headers=headers)
            assert answer.status_code == 401, (headers, path)
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
            assert answer.json()["error"]["type"] == "Unauthorized"
            assert keys.a not in answer.text


async def test_a_key_cannot_see_or_change_another_environments_runs(
    as_a: httpx.AsyncClient, as_b: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    theirs = await _run(as_b, delay=60)
    failed = await _run(as_b)
    db.execute("UPDATE fairlane.runs SET status = 'FAILED' WHERE id = %s", (failed,))
    missing = 10**9
    for run_id in (theirs, failed, missing):
        for method, path, body in (
            ("GET", f"/api/v1/runs/{run_id}", None),
            ("POST", f"/api/v1/runs/{run_id}/cancel", None),
            ("POST", f"/api/v1/runs/{run_id}/retry", None),
            ("POST", f"/api/v1/runs/{run_id}/reschedule", {"delay": 1}),
        ):
            answer = await as_a.request(method, path, json=body)
            assert answer.status_code == 404, (method, path)
            # The same answer as an id that does not exist, but for the id itself.
            assert answer.json()["error"] == {
                "type": "RunNotFoundError",
                "message": f"run {run_id} does not exist",
                "run_id": run_id,
            }
    assert (await as_a.get("/api/v1/runs")).json()["data"] == []
    refused = await as_a.get("/api/v1/runs", params={"environment": "env-b"})
    assert refused.status_code == 403
    rows = db.execute(
        "SELECT status, available_at > now() + interval '30 seconds' FROM fairlane.runs "
        "WHERE id = %s",
        (theirs,),
    ).fetchone()
    assert rows == ("DELAYED", True)
    # And B sees its own.
    assert (await as_b.get(f"/api/v1/runs/{theirs}")).status_code == 200


async def test_bulk_actions_stay_in_the_keys_environment(
    as_a: httpx.AsyncClient,
    as_b: httpx.AsyncClient,
    as_admin: httpx.AsyncClient,
    db: psycopg.Connection[Any],
) -> None:
    mine = [await _run(as_a) for _ in range(2)]
    theirs = [await _run(as_b) for _ in range(3)]
    db.execute("UPDATE fairlane.runs SET status = 'FAILED'")

    def statuses() -> dict[int, str]:
        return dict(db.execute("SELECT id, status FROM fairlane.runs").fetchall())

    # A filter of the key's own is needed: its environment alone is not one.
    refused = await as_a.post("/api/v1/runs/retry")
    assert refused.status_code == 422
    assert "all=true" in refused.json()["error"]["message"]
    # Naming another environment is refused, as for the list, and changes nothing.
    for action in ("retry", "cancel"):
        other = await as_a.post(f"/api/v1/runs/{action}", params={"environment": "env-b"})
        assert other.status_code == 403, action
    dry = await as_a.post("/api/v1/runs/retry", params={"status": "FAILED", "dry_run": "true"})
    assert dry.json() == {"matching": 2, "before_id": max(mine) + 1}
    assert set(statuses().values()) == {"FAILED"}

    done = await as_a.post("/api/v1/runs/retry", params={"all": "true"})
    assert done.json() == {"matched": 2, "changed": 2, "unchanged": {}}
    after = statuses()
    assert [after[run] for run in mine] == ["QUEUED", "QUEUED"]
    assert [after[run] for run in theirs] == ["FAILED"] * 3
    canceled = await as_a.post("/api/v1/runs/cancel", params={"task": "t"})
    assert canceled.json()["changed"] == 2
    assert [statuses()[run] for run in theirs] == ["FAILED"] * 3

    # An admin key acts in the environment it names, up to a dry run's before_id.
    counted = await as_admin.post(
        "/api/v1/runs/retry", params={"environment": "env-b", "dry_run": "1"}
    )
    assert counted.json() == {"matching": 3, "before_id": max(theirs) + 1}
    below = {"environment": "env-b", "before_id": str(max(theirs))}
    retried = await as_admin.post("/api/v1/runs/retry", params=below)
    assert retried.json() == {"matched": 2, "changed": 2, "unchanged": {}}
    assert [statuses()[run] for run in theirs] == ["QUEUED", "QUEUED", "FAILED"]


async def test_a_key_triggers_only_in_its_environment(
    as_a: httpx.AsyncClient, as_b: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    refused = await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"environment": "env-b"}})
    assert refused.status_code == 403
    assert (
        await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"environment": "env-a"}})
    ).status_code == 200
    parent = await _run(as_b)
    child = await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"parent_run_id": parent}})
    assert child.status_code == 404
    many = await as_a.post(
        "/api/v1/tasks/trigger-many",
        json={"items": [{"task": "t"}, {"task": "t", "options": {"environment": "env-b"}}]},
    )
    assert many.status_code == 403
    assert db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE environment = 'env-a'"
    ).fetchone() == (1,)


async def test_limits_of_another_environment_are_forbidden(
    as_a: httpx.AsyncClient, as_admin: httpx.AsyncClient
) -> None:
    for method, path in (
        ("GET", "/api/v1/environments/env-b/limits"),
        ("PUT", "/api/v1/environments/env-b/limits"),
        ("POST", "/api/v1/environments/env-b/pause"),
        ("GET", "/api/v1/environments/env-b/queues/q/limits"),
        ("PUT", "/api/v1/environments/env-b/queues/q/limits"),
        ("GET", "/api/v1/environments/env-b/queues/q/keys"),
        ("POST", "/api/v1/environments/env-b/queues/q/pause"),
        ("GET", "/api/v1/scheduler"),
        ("PUT", "/api/v1/scheduler"),
        ("GET", "/api/v1/workers"),
    ):
        answer = await as_a.request(method, path, json={"rate_limit": 1})
        assert answer.status_code == 403, path
    await as_admin.post("/api/v1/environments/env-b/queues/q/pause")
    await as_admin.post("/api/v1/environments/env-a/queues/q/pause")
    seen = (await as_a.get("/api/v1/limits")).json()
    assert [row["environment"] for row in seen["queues"]] == ["env-a"]
    assert "scheduler" not in seen
    everything = (await as_admin.get("/api/v1/limits")).json()
    assert {row["environment"] for row in everything["queues"]} == {"env-a", "env-b"}
    assert everything["scheduler"]["quantum"] >= 1


async def test_admin_key_sees_every_environment(
    as_a: httpx.AsyncClient, as_b: httpx.AsyncClient, as_admin: httpx.AsyncClient
) -> None:
    mine, theirs = await _run(as_a), await _run(as_b)
    for run_id in (mine, theirs):
        assert (await as_admin.get(f"/api/v1/runs/{run_id}")).status_code == 200
    listed = (await as_admin.get("/api/v1/runs")).json()["data"]
    assert {run["id"] for run in listed} == {mine, theirs}
    only_b = (await as_admin.get("/api/v1/runs", params={"environment": "env-b"})).json()
    assert [run["id"] for run in only_b["data"]] == [theirs]
    made = await as_admin.post(
        "/api/v1/tasks/t/trigger", json={"options": {"environment": "env-c"}}
    )
    assert (await as_admin.get(f"/api/v1/runs/{made.json()['id']}")).json()["environment"] == (
        "env-c"
    )


async def test_a_revoked_key_is_refused_at_once(
    as_a: httpx.AsyncClient, db: psycopg.Connection[Any], keys: Keys
) -> None:
    assert (await as_a.get("/api/v1/runs")).status_code == 200
    (record,) = [key for key in list_keys(db, "env-a")]
    assert record.prefix == keys.a[:10]
    assert record.last_used_at is not None
    revoke_key(db, record.id)
    assert (await as_a.get("/api/v1/runs")).status_code == 401


async def test_only_the_hash_of_a_key_is_stored(db: psycopg.Connection[Any], keys: Keys) -> None:
    stored = db.execute("SELECT secret_hash, prefix FROM fairlane.api_keys").fetchall()
    assert {row[0] for row in stored} == {key_hash(k) for k in (keys.a, keys.b, keys.admin)}
    dump = str(db.execute("SELECT * FROM fairlane.api_keys").fetchall())
    for key in (keys.a, keys.b, keys.admin):
        assert key not in dump


async def test_an_oversized_json_body_is_refused(as_a: httpx.AsyncClient, app: Starlette) -> None:
    limit = app.state.fairlane.max_body_bytes
    big = {"payload": "x" * (limit + 10)}
    declared = await as_a.post("/api/v1/tasks/t/trigger", json=big)
    assert declared.status_code == 413
    assert declared.json()["error"]["type"] == "BodyTooLarge"

    # Sent chunked, without a Content-Length: counted while read, refused past the bound
    # before the rest of the body is asked for.
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"payload": "'
        for _ in range(1000):
            sent += 1
            yield b"x" * 1024
        yield b'"}'

    chunked = await as_a.post(
        "/api/v1/tasks/t/trigger", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert chunked.status_code == 413
    assert sent < 1000  # the server stopped reading: the rest was never produced
    assert (await as_a.get("/api/v1/runs")).json()["data"] == []


async def test_keys_never_reach_the_logs(
    as_a: httpx.AsyncClient,
    http: httpx.AsyncClient,
    keys: Keys,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    await as_a.post("/api/v1/tasks/t/trigger", json={"payload": 1})
    await as_a.get("/api/v1/runs/999999")
    await http.get("/api/v1/runs", headers=bearer(keys.a + "x"))
    await http.get("/api/v1/runs", headers={"Authorization": keys.b})
    token = (await as_a.post("/api/v1/tokens", json={})).json()
    await http.post(token["callback_url"].removeprefix("http://testserver"), json=1)
    access = [r for r in caplog.records if r.name == "fairlane.web.access"]
    assert len(access) == 6
    # Everything the server side logged (the test's own httpx client logs its URLs).
    server = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    text = "\n".join(record.getMessage() for record in server)
    for secret in (keys.a, keys.b, keys.admin, token["callback_url"].rsplit("/", 1)[1]):
        assert secret not in text
    assert "/callback/***" in text
