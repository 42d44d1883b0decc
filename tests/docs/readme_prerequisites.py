"""What each Python block of the README needs and promises (tests/docs/test_readme_snippets.py).

Keys are the heading above a block and its place among that section's Python blocks. ``given``
is what the prose leaves to the reader (``dsn`` is always given: the test's database, also in
``DATABASE_URL``); ``then`` checks what the block says it does.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prerequisites:
    needs: tuple[str, ...] = ()  # blocks run first, in the same namespace
    given: str = ""
    then: str = ""
    worker: bool = False  # a worker serving the Quickstart's tasks runs meanwhile


# Written to app/tasks.py of the project; the others import it as the README says.
TASKS_MODULE = "Quickstart #1"
# The conftest and the test file of a project, run by pytest.
TESTING_BLOCKS = ("Testing #1", "Testing #2")
# Given a database that does not exist yet (test_the_migrate_block_creates_a_database).
MIGRATE_BLOCK = "Living beside your application's alembic #1"

_RUNS_IN_ACME = """
from fairlane import Client as _Client
with _Client() as _client:
    _runs = _client.list_runs(environment="acme", limit=2000)
"""

PREREQUISITES: dict[str, Prerequisites] = {
    TASKS_MODULE: Prerequisites(),
    "Quickstart #2": Prerequisites(
        then=_RUNS_IN_ACME + "assert [run.task for run in _runs] == ['send_receipt']\n"
    ),
    "Quickstart #3": Prerequisites(
        then=_RUNS_IN_ACME
        + "assert len(_runs) == 1001\n"
        + "assert {run.task for run in _runs} == {'resize_image'}\n"
    ),
    "Tasks #1": Prerequisites(then="assert send_receipt.name == 'send_receipt'\n"),
    "Typed handles #1": Prerequisites(
        needs=("Quickstart #2", "Tasks #1"),
        then="""
import anyio
from fairlane import Client as _Client
_async_id = anyio.run(send_from_async_code)
with _Client() as _client:
    _run = _client.get_run(run_id)
    assert (_run.task, _run.queue, _run.priority) == ("send_receipt", "mail", 9)
    assert _client.get_run(_async_id).priority == 5  # the task's default
assert "checkout" in tasks.names()
""",
    ),
    "Progress #1": Prerequisites(
        needs=("Tasks #1",),
        given="def load(path):\n    return ['a', 'b', 'c']\n\n\ndef store(row):\n    pass\n",
        then="""
from fairlane import Client as _Client
from fairlane.testing import eager
with eager(tasks), _Client() as _client:
    _id = import_file.trigger(_client, {"path": "rows.csv"})
    assert _client.get_run(_id).result == 3
""",
    ),
    "Cron schedules #1": Prerequisites(
        needs=("Tasks #1",),
        then="""
with Client() as _client:
    (_schedule,) = _client.schedules.list(environment="acme")
    assert (_schedule.key, _schedule.paused) == ("customer-42", True)
assert "sync_feeds" in tasks.names()
""",
    ),
    "Testing #1": Prerequisites(),
    "Testing #2": Prerequisites(),
    "Trigger options #1": Prerequisites(
        then="""
import anyio
anyio.run(trigger_with_options)
from fairlane import Client as _Client
with _Client() as _client:
    _runs = _client.list_runs(limit=10)
    assert sorted(run.task for run in _runs) == ["reindex", "report", "sync_user"]
""",
    ),
    "Acting on runs #1": Prerequisites(
        given="""
from fairlane import Client as _Client
with _Client() as _client:
    run_id = _client.trigger("resize_image", {"image": 1}, delay="1h")
""",
        then="""
assert result.canceled
with Client() as _client:
    assert _client.get_run(run_id).status == "CANCELED"
    assert _client.get_run(failed).status == "QUEUED"
""",
    ),
    "Waiting for a run #1": Prerequisites(
        worker=True,
        then="""
import anyio
assert run.status == "COMPLETED"
assert run.result == {"width": 128}
assert anyio.run(resize_and_wait).result == {"width": 128}
""",
    ),
    "Sync and async #1": Prerequisites(
        then="""
with Client() as _client:
    assert _client.tokens.get(token_id).status == "COMPLETED"
    assert _client.batches.get(batch.id).received == 2
    assert _client.limits.table()[0]["environment"] == "acme"
""",
    ),
    "Waiting inside a handler #1": Prerequisites(then="assert 'make_album' in tasks.names()\n"),
    "Waiting inside a handler #2": Prerequisites(
        then="""
from fairlane import Client as _Client
with _Client() as _client:
    assert _client.tokens.get(token).output == {"by": "alice"}
""",
    ),
    MIGRATE_BLOCK: Prerequisites(),
    "Scheduling #1": Prerequisites(
        then="""
from fairlane import Client as _Client
with _Client() as _client:
    _rows = {(row["environment"], row["queue"]): row for row in _client.limits.table()}
    assert (_rows[("acme", "images")]["env_limit"], _rows[("acme", "images")]["burst_factor"]) == (
        20, 1.5)
    assert _rows[("acme", "images")]["queue_limit"] == 5
    assert _rows[("acme", "images")]["queue_size_limit"] is None
""",
    ),
    # A revision's body: alembic calls upgrade() in a migration's context, which
    # tests/schema/test_concurrent_indexes.py gives the same helpers.
    "Developing #1": Prerequisites(then="assert callable(upgrade)\n"),
    "HTTP API and dashboard #1": Prerequisites(
        then="""
import anyio
import httpx

async def _ask():
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as web:
        answer = await web.get("/jobs/api/v1/openapi.json")
    await jobs.state.fairlane.close()
    return answer

_answer = anyio.run(_ask)
assert _answer.status_code == 200
assert _answer.json()["openapi"].startswith("3.")
""",
    ),
}
