"""The dashboard's runs list: error, duration and finished columns; search by run id,
idempotency key and tag; bulk retry and cancel over a filter, whose confirmation states the
count the database gives and whose action takes exactly the runs counted."""

from __future__ import annotations

import re
from typing import Any

import httpx
import psycopg
import pytest

from tests.web.conftest import Keys

pytestmark = pytest.mark.anyio


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


async def _sign_in(http: httpx.AsyncClient, key: str) -> None:
    form = await http.get("/login")
    answer = await http.post("/login", data={"csrf": _csrf(form.text), "key": key, "next": "/"})
    assert answer.status_code == 303


async def _trigger(client: httpx.AsyncClient, task: str, **options: Any) -> int:
    answer = await client.post(
        f"/api/v1/tasks/{task}/trigger", json={"payload": {}, "options": options}
    )
    assert answer.status_code in (200, 201), answer.text
    return int(answer.json()["id"])


def _fail(db: psycopg.Connection[Any], ids: list[int], message: str = "card declined") -> None:
    db.execute(
        "UPDATE fairlane.runs SET status = 'FAILED', attempts = 1,"
        " started_at = now() - interval '90 seconds', finished_at = now() - interval '60 seconds',"
        " error = jsonb_build_object('type', 'PaymentError', 'message', %s::text)"
        " WHERE id = ANY(%s)",
        [message, ids],
    )


def _ids(html: str) -> list[int]:
    return [int(found) for found in re.findall(r'data-testid="run-(\d+)"', html)]


async def test_the_list_shows_error_duration_and_finished(
    http: httpx.AsyncClient, keys: Keys, as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    failed = await _trigger(as_a, "charge")
    queued = await _trigger(as_a, "charge")
    _fail(db, [failed], "card declined <b>twice</b>")
    await _sign_in(http, keys.admin)
    page = (await http.get("/runs")).text
    for column in ("error", "duration", "finished"):
        assert f">{column}</th>" in page, column
    row = page[page.index(f'data-testid="run-{failed}"') :].split("</tr>")[0]
    assert "PaymentError: card declined &lt;b&gt;twice&lt;/b&gt;" in row
    assert "30s" in row  # started 90 s ago, finished 60 s ago
    assert re.search(r"1m( 0s)? ago|60s ago", row), row
    other = page[page.index(f'data-testid="run-{queued}"') :].split("</tr>")[0]
    assert other.count('<span class="muted">-</span>') == 3  # no error, duration, finish


async def test_search_by_run_id_idempotency_key_and_tag(
    http: httpx.AsyncClient, keys: Keys, as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    keyed = await _trigger(as_a, "charge", idempotency_key="order-1234")
    tagged = await _trigger(as_a, "charge", tags=["customer:42"])
    plain = await _trigger(as_a, "charge")
    await _sign_in(http, keys.admin)

    went = await http.get("/runs", params={"id": f" #{plain} "})
    assert went.status_code == 303
    assert went.headers["location"] == f"/runs/{plain}"
    assert (await http.get("/runs", params={"id": "12ab"})).status_code == 400

    assert _ids((await http.get("/runs", params={"key": "order-1234"})).text) == [keyed]
    # The stored form (the hash) finds it too; another key finds nothing.
    stored = db.execute("SELECT idempotency_key FROM fairlane.runs WHERE id = %s", [keyed])
    hashed = stored.fetchone()
    assert hashed is not None
    assert _ids((await http.get("/runs", params={"key": hashed[0]})).text) == [keyed]
    assert _ids((await http.get("/runs", params={"key": "order-9999"})).text) == []
    # Once its run failed, the key makes a new run and is freed from the old one, which the
    # key still finds (its inactive key).
    _fail(db, [keyed])
    again = await _trigger(as_a, "charge", idempotency_key="order-1234")
    assert again != keyed
    assert _ids((await http.get("/runs", params={"key": "order-1234"})).text) == [again, keyed]

    assert _ids((await http.get("/runs", params={"tag": "customer:42"})).text) == [tagged]


async def test_bulk_retry_states_the_count_and_takes_exactly_those_runs(
    http: httpx.AsyncClient, keys: Keys, as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    failed = [await _trigger(as_a, "charge", tags=["batch-7"]) for _ in range(3)]
    other = await _trigger(as_a, "charge", tags=["batch-7"])  # still queued: not retryable
    elsewhere = await _trigger(as_a, "refund")
    _fail(db, [*failed, elsewhere])
    await _sign_in(http, keys.admin)

    confirm = await http.get("/runs/bulk/retry", params={"tag": "batch-7"})
    assert confirm.status_code == 200
    assert re.search(r'data-testid="bulk-count">4<', confirm.text)
    assert re.search(r'data-testid="bulk-changing">3<', confirm.text)
    assert "Retry 4 runs" in confirm.text
    ceiling = re.search(r'name="ceiling" value="(\d+)"', confirm.text)
    assert ceiling
    assert int(ceiling.group(1)) == other + 1

    # A run that starts matching after the confirmation is not taken.
    late = await _trigger(as_a, "charge", tags=["batch-7"])
    _fail(db, [late])
    form = {
        "csrf": _csrf(confirm.text),
        "tag": "batch-7",
        "ceiling": ceiling.group(1),
        "count": "4",
    }
    done = await http.post("/runs/bulk/retry", data=form)
    assert done.status_code == 303
    statuses = dict(db.execute("SELECT id, status FROM fairlane.runs").fetchall())
    assert [statuses[run] for run in failed] == ["QUEUED"] * 3
    assert (statuses[other], statuses[elsewhere], statuses[late]) == ("QUEUED", "FAILED", "FAILED")
    flashed = (await http.get(done.headers["location"])).text
    assert "3 of 4 matching runs retried; left alone: 1 QUEUED" in flashed

    # Without a CSRF token nothing happens; without a filter there is no bulk action.
    refused = await http.post("/runs/bulk/cancel", data={**form, "csrf": "stale"})
    assert refused.status_code == 403
    assert db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE status = 'CANCELED'"
    ).fetchone() == (0,)
    assert (await http.get("/runs/bulk/cancel")).status_code == 303
    assert (await http.get("/runs/bulk/delete?tag=x")).status_code == 404


async def test_bulk_cancel_by_status_and_queue(
    http: httpx.AsyncClient, keys: Keys, as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    mail = [await _trigger(as_a, "send", queue="mail") for _ in range(2)]
    kept = await _trigger(as_a, "send", queue="sms")
    await _sign_in(http, keys.admin)
    confirm = await http.get(
        "/runs/bulk/cancel", params={"environment": "env-a", "queue": "mail", "status": "QUEUED"}
    )
    assert re.search(r'data-testid="bulk-count">2<', confirm.text)
    ceiling = re.search(r'name="ceiling" value="(\d+)"', confirm.text)
    assert ceiling
    form = {
        "csrf": _csrf(confirm.text),
        "environment": "env-a",
        "queue": "mail",
        "status": "QUEUED",
        "ceiling": ceiling.group(1),
        "count": "2",
    }
    assert (await http.post("/runs/bulk/cancel", data=form)).status_code == 303
    statuses = dict(db.execute("SELECT id, status FROM fairlane.runs").fetchall())
    assert [statuses[run] for run in mail] == ["CANCELED", "CANCELED"]
    assert statuses[kept] == "QUEUED"
