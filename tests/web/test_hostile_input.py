"""No 5xx from bad input: every request of tests/web/hostile.py answers 4xx naming what it
refused (JSON under /api/, a page on the dashboard), in-process and against a real server
whose keep-alive connection survives them all while a worker drains both environments."""

from __future__ import annotations

import http.client
import json
import re
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry
from fairlane.web import create_app
from tests.helpers import fast_worker, run_status, wait_until, worker_in_thread
from tests.helpers.browser import live_server
from tests.web.conftest import Keys
from tests.web.hostile import API, DASHBOARD, Hostile

pytestmark = pytest.mark.anyio

NAMING = ("field", "parameter", "option", "setting")


def _named(error: dict[str, Any]) -> set[str]:
    """What an error names: its field, parameter, option or setting, or a detail's key."""
    return {str(error[key]) for key in NAMING if key in error} | set(error)


def _api_problem(case: Hostile, status: int, content_type: str, body: bytes) -> str | None:
    """What is wrong with the answer to ``case``, if anything."""
    if not 400 <= status < 500:
        return f"{case.id}: {status} {body[:300]!r}"
    if not content_type.startswith("application/json"):
        return f"{case.id}: {content_type}"
    error = json.loads(body)["error"]
    if not (error["type"] and error["message"] and case.names in _named(error)):
        return f"{case.id}: does not name {case.names!r}: {error}"
    return None


# A delayed run, a token and a batch of env-a: ids 1 exist and are key A's, the run out of a
# worker's reach.
SEED: tuple[tuple[str, dict[str, Any]], ...] = (
    ("/api/v1/tasks/t/trigger", {"options": {"delay": 3600}}),
    ("/api/v1/tokens", {}),
    ("/api/v1/batches", {"run_count": 2}),
)


async def _seed(as_a: httpx.AsyncClient) -> None:
    for path, document in SEED:
        assert (await as_a.post(path, json=document)).status_code < 300


async def test_the_api_answers_every_hostile_request_4xx_naming_the_field(
    as_a: httpx.AsyncClient, as_admin: httpx.AsyncClient
) -> None:
    await _seed(as_a)
    problems = []
    for case in API:
        client = as_admin if case.admin else as_a
        headers = {"Content-Type": "application/json"} if case.body is not None else {}
        answer = await client.request(case.method, case.path, content=case.body, headers=headers)
        problems.append(
            _api_problem(case, answer.status_code, answer.headers["content-type"], answer.content)
        )
    assert [problem for problem in problems if problem] == []


async def _sign_in(http: httpx.AsyncClient, key: str) -> str:
    """An admin session; the CSRF token of its forms."""
    form = await http.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert found
    signed = await http.post("/login", data={"csrf": found.group(1), "key": key, "next": "/"})
    assert signed.status_code == 303
    page = re.search(r'name="csrf" value="([^"]+)"', (await http.get("/queues")).text)
    assert page
    return page.group(1)


async def test_the_dashboard_answers_every_hostile_request_with_a_4xx_page(
    http: httpx.AsyncClient, keys: Keys
) -> None:
    csrf = await _sign_in(http, keys.admin)
    problems = []
    for case in DASHBOARD:
        form = {"csrf": csrf, **dict(case.form)} if case.method == "POST" else None
        answer = await http.request(case.method, case.path, data=form)
        if not 400 <= answer.status_code < 500:
            problems.append(f"{case.id}: {answer.status_code} {answer.text[:300]}")
        elif not answer.headers["content-type"].startswith("text/html"):
            problems.append(f"{case.id}: {answer.headers['content-type']}")
        elif case.names not in answer.text:
            problems.append(f"{case.id}: does not name {case.names!r}: {answer.text[:300]}")
    assert problems == []


async def test_a_limit_typed_on_the_queues_page_out_of_range_is_shown_not_a_500(
    http: httpx.AsyncClient, keys: Keys, db: psycopg.Connection[Any]
) -> None:
    csrf = await _sign_in(http, keys.admin)
    for typed in ("²", str(2**40), "9" * 30):
        answer = await http.post(
            "/queues/limits",
            data={"csrf": csrf, "environment": "env-a", "concurrency_limit": typed},
        )
        assert answer.status_code == 303, (typed, answer.text[:300])
        assert "concurrency_limit" in httpx.URL(answer.headers["location"]).params["flash"]
    assert db.execute(
        "SELECT count(*) FROM fairlane.environments WHERE name = 'env-a' "
        "AND concurrency_limit IS NOT NULL"
    ).fetchone() == (0,)


def _send(conn: http.client.HTTPConnection, case: Hostile, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    if case.body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(case.method, case.path, body=case.body, headers=headers)
    answer = conn.getresponse()
    body = answer.read()
    problem = _api_problem(case, answer.status, answer.getheader("content-type") or "", body)
    assert problem is None, problem
    assert answer.getheader("connection") != "close", case.id


def _json(conn: http.client.HTTPConnection, method: str, path: str, key: str, document: Any) -> Any:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    conn.request(method, path, body=json.dumps(document), headers=headers)
    answer = conn.getresponse()
    body = answer.read()
    assert answer.status < 300, (method, path, answer.status, body[:300])
    return json.loads(body)


async def test_an_attacker_gets_4xx_on_one_connection_and_the_worker_goes_on(
    dsn: str, db: psycopg.Connection[Any], keys: Keys
) -> None:
    tasks = TaskRegistry()

    @tasks.task("echo")
    async def echo(ctx: RunContext, payload: Any) -> Any:
        return payload

    def completed(run_id: int) -> bool:
        return run_status(db, run_id).value == "COMPLETED"

    with live_server(create_app(dsn, "fairlane", pool_size=4)) as url:
        address = urlsplit(url)
        conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
        for path, document in SEED:
            _json(conn, "POST", path, keys.a, document)
        async with worker_in_thread(fast_worker(tasks, dsn)):
            before = _json(conn, "POST", "/api/v1/tasks/echo/trigger", keys.b, {"payload": 1})
            await wait_until(lambda: completed(before["id"]), what="B's first run")
            conn.request("GET", "/api/v1/openapi.json")
            conn.getresponse().read()
            sock = conn.sock
            assert isinstance(sock, socket.socket)
            for case in API:
                _send(conn, case, keys.admin if case.admin else keys.a)
                assert conn.sock is sock, f"the server closed the connection after {case.id}"
            # The widest settings the columns take: the claim's arithmetic must hold them too.
            _json(
                conn,
                "PUT",
                "/api/v1/environments/env-a/limits",
                keys.a,
                {"concurrency_limit": 2**31 - 1, "burst_factor": 9999.99},
            )
            _json(
                conn,
                "PUT",
                "/api/v1/scheduler",
                keys.admin,
                {
                    "quantum": 2**31 - 1,
                    "max_deficit": 2**31 - 1,
                    "rate_limit_per_s": 1e9,
                    "rate_burst": 1e9,
                },
            )
            mine = _json(conn, "POST", "/api/v1/tasks/echo/trigger", keys.a, {"payload": 2})
            theirs = _json(conn, "POST", "/api/v1/tasks/echo/trigger", keys.b, {"payload": 3})
            assert conn.sock is sock
            await wait_until(
                lambda: completed(mine["id"]) and completed(theirs["id"]),
                what="both environments' runs after the attack",
            )
        conn.close()


def test_the_document_states_the_ranges_requests_are_held_to() -> None:
    from fairlane.web.api.openapi import document

    served = document()
    paths, schemas = served["paths"], served["components"]["schemas"]
    run_id = paths["/runs/{id}"]["get"]["parameters"][0]["schema"]
    assert run_id == {"type": "integer", "format": "int64", "minimum": 1, "maximum": 2**63 - 1}
    options = schemas["TriggerOptions"]["properties"]
    assert (options["priority"]["minimum"], options["priority"]["maximum"]) == (-(2**31), 2**31 - 1)
    assert options["delay"]["oneOf"][0]["oneOf"][0]["maximum"] == 100 * 365 * 86_400
    limits = paths["/environments/{environment}/limits"]["put"]["requestBody"]
    fields = limits["content"]["application/json"]["schema"]["properties"]
    assert fields["concurrency_limit"]["maximum"] == 2**31 - 1
    assert (fields["burst_factor"]["minimum"], fields["burst_factor"]["maximum"]) == (1, 9999.99)
    batch = paths["/batches"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert (
        batch["properties"]["run_count"]["minimum"],
        batch["properties"]["parent_run_id"]["format"],
    ) == (1, "int64")
