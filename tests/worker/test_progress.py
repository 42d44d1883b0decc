"""Progress from a handler: ``ctx.set_metadata`` is visible through ``get_run``, coalesced (a
tight loop does not write per call), written before the outcome, and fenced by the lease token
(a stale worker's write changes nothing)."""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry
from fairlane.errors import MetadataRemovalError, PayloadError
from fairlane.models import ClaimedRun
from fairlane.worker.lease_store import Completion, Lease, LeaseStore
from tests.helpers import fast_worker, run_row, run_status, running, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(dsn: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(dsn) as opened:
        yield opened


@pytest.fixture
async def conn(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        yield connection


async def test_progress_is_visible_through_get_run_while_the_handler_runs(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks = TaskRegistry()
    go_on = anyio.Event()
    seen_locally: list[dict[str, Any]] = []

    @tasks.task()
    async def import_rows(ctx: RunContext, payload: dict[str, int]) -> int:
        ctx.set_metadata(done=0, total=payload["rows"])
        await go_on.wait()
        ctx.set_metadata(done=payload["rows"], phase="finished")
        seen_locally.append(dict(ctx.metadata))
        return payload["rows"]

    run_id = await client.trigger("import_rows", {"rows": 40}, metadata={"source": "upload"})
    async with running(fast_worker(tasks, dsn)):

        async def progress_shown() -> bool:
            return (await client.get_run(run_id)).metadata.get("total") == 40

        await wait_until(progress_shown, within=5, what="the progress to be written")
        run = await client.get_run(run_id)
        assert run.status is RunStatus.EXECUTING
        assert run.metadata == {"source": "upload", "done": 0, "total": 40}
        go_on.set()
        await wait_until(lambda: run_status(db, run_id).is_final, within=5, what="completion")
    final = await client.get_run(run_id)
    assert final.status is RunStatus.COMPLETED
    expected = {"source": "upload", "done": 40, "total": 40, "phase": "finished"}
    assert final.metadata == expected, "the last progress is written with (before) the outcome"
    assert seen_locally == [expected], "ctx.metadata has the fields at once"


async def test_a_tight_loop_is_coalesced(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    """20,000 calls from an async handler that never yields, and a sync handler calling for
    about a second: a few writes each, and the last value lands before the outcome."""
    tasks = TaskRegistry()

    @tasks.task()
    async def tight(ctx: RunContext, payload: None) -> None:
        for n in range(20_000):
            ctx.set_metadata(n=n)

    @tasks.task()
    def in_a_thread(ctx: RunContext, payload: None) -> None:
        deadline = time.monotonic() + 1.0
        n = 0
        while time.monotonic() < deadline:
            n += 1
            ctx.set_metadata(n=n, final=False)
            time.sleep(0.0005)
        ctx.set_metadata(n=n, final=True)

    worker = fast_worker(tasks, dsn, metadata_interval=0.2)
    looped = await client.trigger("tight")
    threaded = await client.trigger("in_a_thread")
    async with running(worker):
        for run_id in (looped, threaded):
            await wait_until(lambda r=run_id: run_status(db, r).is_final, within=10, what="end")
    assert run_row(db, looped)["metadata"] == {"n": 19_999}
    last = run_row(db, threaded)["metadata"]
    assert last["final"] is True
    assert last["n"] > 100, "the sync handler called many times"
    # One second at one write per 0.2 s, plus the first, plus the ones with the outcomes.
    assert worker.stats.metadata_writes <= 10, worker.stats.metadata_writes


async def test_ctx_metadata_update_is_set_metadata(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    """``ctx.metadata.update(...)`` and ``ctx.metadata[key] = value``: visible through
    ``get_run`` while the handler runs, coalesced in a tight loop, the last value written before
    the outcome; keys are never removed and a non-JSON value changes nothing."""
    tasks = TaskRegistry()
    go_on = anyio.Event()
    refused: list[BaseException] = []

    @tasks.task()
    async def import_rows(ctx: RunContext, payload: int) -> str:
        ctx.metadata.update({"done": 0}, total=payload)
        await go_on.wait()
        for n in range(1, 20_001):
            ctx.metadata.update(done=n)
        ctx.metadata["phase"] = "finished"
        try:
            ctx.metadata.pop("source")
        except MetadataRemovalError as error:
            refused.append(error)
        try:
            ctx.metadata.clear()
        except MetadataRemovalError as error:
            refused.append(error)
        try:
            ctx.metadata.update(when=threading.Event())
        except PayloadError as error:
            refused.append(error)
        return json.dumps(ctx.metadata, sort_keys=True)  # a real dict

    run_id = await client.trigger("import_rows", 40, metadata={"source": "upload"})
    worker = fast_worker(tasks, dsn, metadata_interval=0.2)
    async with running(worker):

        async def progress_shown() -> bool:
            return (await client.get_run(run_id)).metadata.get("total") == 40

        await wait_until(progress_shown, within=5, what="the progress to be written")
        assert (await client.get_run(run_id)).metadata == {
            "source": "upload",
            "done": 0,
            "total": 40,
        }
        writes_before = worker.stats.metadata_writes
        go_on.set()
        await wait_until(lambda: run_status(db, run_id).is_final, within=10, what="completion")
    final = await client.get_run(run_id)
    expected = {"source": "upload", "done": 20_000, "total": 40, "phase": "finished"}
    assert final.status is RunStatus.COMPLETED
    assert final.metadata == expected, "the last fields are written with the outcome"
    assert json.loads(final.result) == expected, "ctx.metadata had them at once"
    assert [type(error) for error in refused] == [
        MetadataRemovalError,
        MetadataRemovalError,
        PayloadError,
    ]
    # 20,000 updates without a yield: coalesced into the write that goes with the outcome.
    assert worker.stats.metadata_writes - writes_before <= 2


def test_ctx_metadata_writes_take_the_set_metadata_path() -> None:
    """Every write of ``ctx.metadata`` is a patch of pending fields for the worker's writer
    (which writes them fenced by the lease token), the writer told once per batch of them."""
    run = ClaimedRun(7, uuid.uuid4(), "t", None, 1, 3, "default", "default", {"a": 1}, None, None)
    told: list[RunContext] = []
    ctx = RunContext(run=run, worker_id="w", _metadata_sink=told.append)
    ctx.metadata.update(b=2)
    ctx.metadata["c"] = 3
    ctx.metadata |= {"d": 4}
    assert ctx.metadata.setdefault("a", 9) == 1
    assert ctx.metadata.setdefault("e", 5) == 5
    assert told == [ctx], "the writer is told once until it takes the fields"
    assert ctx.take_metadata() == {"b": 2, "c": 3, "d": 4, "e": 5}
    ctx.set_metadata(b=20)
    ctx.metadata.update()  # nothing to merge: nothing pending
    assert told == [ctx, ctx]
    assert ctx.take_metadata() == {"b": 20}
    assert ctx.metadata == run.metadata == {"a": 1, "b": 20, "c": 3, "d": 4, "e": 5}
    assert type(copy.copy(ctx.metadata)) is dict
    with pytest.raises(MetadataRemovalError):
        del ctx.metadata["a"]
    with pytest.raises(TypeError, match="metadata keys are strings"):
        ctx.metadata.update({1: "x"})  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="cannot be replaced"):
        ctx.metadata = {}  # type: ignore[assignment]
    assert ctx.take_metadata() == {}


async def test_metadata_must_be_json(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks = TaskRegistry()
    refused: list[str] = []

    @tasks.task()
    async def bad(ctx: RunContext, payload: None) -> None:
        try:
            ctx.set_metadata(when=threading.Event())
        except PayloadError as error:
            refused.append(str(error))

    run_id = await client.trigger("bad")
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id).is_final, within=5, what="end")
    assert refused
    assert "metadata is not JSON-serialisable" in refused[0]
    assert run_row(db, run_id)["metadata"] == {}


# -- the fence -------------------------------------------------------------------------------


async def _lapse_and_reclaim(db: psycopg.Connection[Any], run_id: int) -> None:
    db.execute(
        "UPDATE fairlane.runs SET lease_until = now() - interval '1 second' WHERE id = %s",
        (run_id,),
    )
    db.execute("SELECT fairlane.reclaim_expired_leases()")
    assert run_status(db, run_id) is RunStatus.QUEUED


async def test_a_stale_workers_metadata_write_changes_nothing(
    db: psycopg.Connection[Any], conn: psycopg.AsyncConnection[Any], client: AsyncClient
) -> None:
    stale_store = LeaseStore("fairlane", lease_seconds=30, worker_id="stale")
    fresh_store = LeaseStore("fairlane", lease_seconds=30, worker_id="fresh")
    run_id = await client.trigger("job", metadata={"owner": "nobody"})
    [first] = await stale_store.claim(conn, 1)
    stale = Lease(run_id, first.lease_token)
    assert await stale_store.set_metadata(conn, [(stale, '{"progress": 1}')]) == {run_id}
    assert run_row(db, run_id)["metadata"] == {"owner": "nobody", "progress": 1}

    await _lapse_and_reclaim(db, run_id)
    [second] = await fresh_store.claim(conn, 1)
    fresh = Lease(run_id, second.lease_token)
    assert await fresh_store.set_metadata(conn, [(fresh, '{"progress": 10}')]) == {run_id}
    before = run_row(db, run_id)

    # The worker that lost its lease writes its (older) progress: the fence refuses it.
    assert await stale_store.set_metadata(conn, [(stale, '{"progress": 2, "x": 1}')]) == set()
    assert run_row(db, run_id) == before
    assert before["metadata"] == {"owner": "nobody", "progress": 10}

    # After the run ended, not even its last owner writes any more.
    await fresh_store.complete(conn, [Completion(fresh, "null")])
    done = run_row(db, run_id)
    assert await fresh_store.set_metadata(conn, [(fresh, '{"progress": 11}')]) == set()
    assert run_row(db, run_id) == done


async def test_a_batch_of_patches_applies_only_the_held_leases(
    db: psycopg.Connection[Any], conn: psycopg.AsyncConnection[Any], client: AsyncClient
) -> None:
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="w")
    ids = [await client.trigger("job", environment=f"env-{n}") for n in range(3)]
    claimed = {run.id: run.lease_token for run in await store.claim(conn, 3)}
    import uuid

    patches = [
        (Lease(ids[0], claimed[ids[0]]), '{"a": 1}'),
        (Lease(ids[1], uuid.uuid4()), '{"b": 1}'),  # a token that is not the run's
        (Lease(ids[2], claimed[ids[2]]), '{"c": {"nested": true}}'),
    ]
    assert await store.set_metadata(conn, patches) == {ids[0], ids[2]}
    assert [run_row(db, run_id)["metadata"] for run_id in ids] == [
        {"a": 1},
        {},
        {"c": {"nested": True}},
    ]
