"""1,000 open event streams on one ``fairlane serve`` process: the database connections it
holds stay the pool's few plus its one listener, and its memory stays bounded. Prints the
process's RSS before and after, the connections, and how long one change of every followed
run took to reach every stream."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from fairlane.web.keys import create_key
from tests.helpers.serve import rss_bytes, serve
from tests.helpers.sse import events, until

pytestmark = [pytest.mark.anyio, pytest.mark.stress, pytest.mark.timeout(300)]

STREAMS = 1000
RUNS = 50  # the streams follow these, 20 each
POOL = 4
# Generous: a stream costs a task, a socket and its buffers, a few tens of kB at most.
MAX_GROWTH_BYTES = 200 * 1024 * 1024


def _server_connections(db: psycopg.Connection[Any]) -> int:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_thousand_streams_hold_the_pool_s_connections_and_bounded_memory(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    key = create_key(db, "env-a", name="a")[1]
    others = _server_connections(db)  # the test's own, before the server runs
    options = ("--pool-size", str(POOL), "--max-streams", "2000")
    with serve(dsn, *options, "--streams-per-environment", "2000") as served:
        limits = httpx.Limits(max_connections=STREAMS + 10, max_keepalive_connections=10)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(
            base_url=served.url, headers=headers, timeout=60, limits=limits
        ) as http:
            ids = []
            for _ in range(RUNS):
                made = await http.post("/api/v1/tasks/t/trigger", json={})
                ids.append(made.json()["id"])
            before = rss_bytes(served.pid)
            opened, ended = anyio.Event(), anyio.Event()
            counts = {"open": 0, "ended": 0}

            async def follow(run_id: int) -> None:
                async with http.stream("GET", f"/api/v1/runs/{run_id}/events") as response:
                    assert response.status_code == 200
                    seen = events(response)
                    await until(seen, "run")
                    counts["open"] += 1
                    if counts["open"] == STREAMS:
                        opened.set()
                    await until(seen, "result")
                    counts["ended"] += 1
                    if counts["ended"] == STREAMS:
                        ended.set()

            async with anyio.create_task_group() as group:
                for index in range(STREAMS):
                    group.start_soon(follow, ids[index % RUNS])
                await opened.wait()
                after = rss_bytes(served.pid)
                connections = _server_connections(db) - others
                started = time.monotonic()
                db.execute("UPDATE fairlane.runs SET status = 'CANCELED', finished_at = now()")
                await ended.wait()
                fan_out_s = time.monotonic() - started
    growth = after - before
    print(
        f"\n{STREAMS} streams on one fairlane serve: RSS {before / 2**20:.1f} MiB before, "
        f"{after / 2**20:.1f} MiB with them open (+{growth / 2**20:.1f} MiB, "
        f"{growth / STREAMS / 1024:.1f} KiB a stream); database connections held: "
        f"{connections} (pool {POOL} + 1 listener); {RUNS} runs changed, every stream told "
        f"in {fan_out_s:.2f} s"
    )
    assert connections <= POOL + 1
    assert growth < MAX_GROWTH_BYTES
