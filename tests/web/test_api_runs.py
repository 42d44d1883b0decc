"""Triggering and acting on runs through the JSON API."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from tests.helpers import run_row

pytestmark = pytest.mark.anyio


async def test_trigger_answers_the_run_id_with_every_option(
    as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    answer = await as_a.post(
        "/api/v1/tasks/send_email/trigger",
        json={
            "payload": {"to": "x@example.com"},
            "options": {
                "queue": {"name": "mail"},
                "priority": 5,
                "maxAttempts": 4,
                "delay": "1h",
                "ttl": "2h",
                "max_duration": 30,
                "tags": ["welcome", "user:1"],
                "metadata": {"source": "api"},
                "machine": "small-1x",
                "idempotencyKey": "welcome-1",
                "idempotency_ttl": "1d",
            },
        },
    )
    assert answer.status_code == 200, answer.text
    run_id = answer.json()["id"]
    row = run_row(db, run_id)
    assert (row["environment"], row["queue"], row["task"]) == ("env-a", "mail", "send_email")
    assert (row["status"], row["priority"], row["max_attempts"]) == ("DELAYED", 5, 4)
    assert row["payload"] == {"to": "x@example.com"}
    assert row["tags"] == ["welcome", "user:1"]
    assert row["metadata"] == {"source": "api"}
    assert (row["machine"], row["max_duration_s"], row["ttl_s"]) == ("small-1x", 30, 7200)
    again = await as_a.post(
        "/api/v1/tasks/send_email/trigger",
        json={"payload": {}, "options": {"idempotency_key": "welcome-1"}},
    )
    assert again.json()["id"] == run_id


async def test_trigger_with_no_body_and_a_debounce(as_a: httpx.AsyncClient) -> None:
    plain = await as_a.post("/api/v1/tasks/ping/trigger")
    assert plain.status_code == 200
    first = await as_a.post(
        "/api/v1/tasks/reindex/trigger",
        json={"options": {"debounce": {"key": "k", "delay": "5s", "mode": "trailing"}}},
    )
    second = await as_a.post(
        "/api/v1/tasks/reindex/trigger",
        json={
            "payload": 2,
            "options": {"debounce": {"key": "k", "delay": "5s", "mode": "trailing"}},
        },
    )
    assert first.json()["id"] == second.json()["id"]
    run = (await as_a.get(f"/api/v1/runs/{first.json()['id']}")).json()
    assert (run["status"], run["payload"]) == ("DELAYED", 2)


async def test_bad_options_are_refused_naming_the_option(as_a: httpx.AsyncClient) -> None:
    unknown = await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"colour": "red"}})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["option"] == "colour"
    bad = await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"delay": "soon"}})
    assert bad.status_code == 422
    assert bad.json()["error"] == {
        **bad.json()["error"],
        "type": "InvalidDurationError",
        "option": "delay",
    }
    attempts = await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"max_attempts": 0}})
    assert attempts.status_code == 422
    assert attempts.json()["error"]["option"] == "max_attempts"
    field = await as_a.post("/api/v1/tasks/t/trigger", json={"payload": 1, "extra": 2})
    assert field.status_code == 422
    not_json = await as_a.post(
        "/api/v1/tasks/t/trigger", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 400
    assert not_json.json()["error"]["type"] == "BadRequest"


async def test_trigger_many_is_all_or_nothing(
    as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    items = [{"task": "t", "payload": n} for n in range(3)]
    made = await as_a.post("/api/v1/tasks/trigger-many", json={"items": items})
    assert made.status_code == 200
    ids = made.json()["ids"]
    assert len(ids) == 3
    assert ids == sorted(ids)
    refused = await as_a.post(
        "/api/v1/tasks/trigger-many",
        json={"items": [*items, {"task": "t", "options": {"priority": "high"}}]},
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["index"] == 3
    assert db.execute("SELECT count(*) FROM fairlane.runs").fetchone() == (3,)


async def test_queue_size_limit_answers_429(
    as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    limited = await as_a.put(
        "/api/v1/environments/env-a/queues/small/limits", json={"size_limit": 1}
    )
    assert limited.status_code == 200, limited.text
    assert (
        await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"queue": "small"}})
    ).status_code == 200
    full = await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"queue": "small"}})
    assert full.status_code == 429
    assert full.json()["error"]["type"] == "QueueSizeLimitExceeded"
    assert full.json()["error"]["limit"] == 1


async def test_get_list_and_page_runs(as_a: httpx.AsyncClient) -> None:
    ids = []
    for n in range(5):
        options = {"tags": ["odd"] if n % 2 else ["even"], "queue": f"q{n % 2}"}
        answer = await as_a.post("/api/v1/tasks/t/trigger", json={"payload": n, "options": options})
        ids.append(answer.json()["id"])
    run = (await as_a.get(f"/api/v1/runs/{ids[0]}")).json()
    assert run["id"] == ids[0]
    assert run["status"] == "QUEUED"
    assert run["payload"] == 0
    assert "lease_token" not in run
    page = (await as_a.get("/api/v1/runs", params={"limit": 2})).json()
    assert [r["id"] for r in page["data"]] == ids[::-1][:2]
    rest = (
        await as_a.get("/api/v1/runs", params={"limit": 2, "before_id": page["next_before_id"]})
    ).json()
    assert [r["id"] for r in rest["data"]] == ids[::-1][2:4]
    odd = (await as_a.get("/api/v1/runs", params={"tag": "odd", "queue": "q1"})).json()
    assert [r["id"] for r in odd["data"]] == [ids[3], ids[1]]
    assert odd["next_before_id"] is None
    queued = (await as_a.get("/api/v1/runs", params={"status": "queued,delayed"})).json()
    assert len(queued["data"]) == 5
    bad = await as_a.get("/api/v1/runs", params={"status": "SLEEPING"})
    assert bad.status_code == 400


async def test_cancel_retry_reschedule(as_a: httpx.AsyncClient) -> None:
    run_id = (await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"delay": 60}})).json()[
        "id"
    ]
    moved = await as_a.post(f"/api/v1/runs/{run_id}/reschedule", json={"delay": "2h"})
    assert moved.status_code == 200
    assert moved.json()["status"] == "DELAYED"
    at = await as_a.post(
        f"/api/v1/runs/{run_id}/reschedule", json={"delay": "2030-01-01T00:00:00+00:00"}
    )
    assert at.json()["available_at"].startswith("2030-01-01")
    not_retryable = await as_a.post(f"/api/v1/runs/{run_id}/retry")
    assert not_retryable.status_code == 409
    assert not_retryable.json()["error"]["type"] == "RunNotRetryableError"
    canceled = await as_a.post(f"/api/v1/runs/{run_id}/cancel")
    assert canceled.json() == {
        "id": run_id,
        "canceled": True,
        "status": "CANCELED",
        "previous_status": "DELAYED",
        "descendants_canceled": 0,
    }
    again = await as_a.post(f"/api/v1/runs/{run_id}/cancel")
    assert again.json()["canceled"] is False
    not_delayed = await as_a.post(f"/api/v1/runs/{run_id}/reschedule", json={"delay": 5})
    assert not_delayed.status_code == 409
    missing = await as_a.post("/api/v1/runs/999999/cancel")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "RunNotFoundError"


async def test_retry_requeues_a_failed_run(
    as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    run_id = (await as_a.post("/api/v1/tasks/t/trigger")).json()["id"]
    db.execute(
        "UPDATE fairlane.runs SET status = 'FAILED', attempts = 3, finished_at = now() "
        "WHERE id = %s",
        (run_id,),
    )
    retried = await as_a.post(f"/api/v1/runs/{run_id}/retry")
    assert retried.status_code == 200
    assert (retried.json()["status"], retried.json()["max_attempts"]) == ("QUEUED", 4)
