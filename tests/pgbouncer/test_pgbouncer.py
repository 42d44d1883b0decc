"""fairlane through a real PgBouncer in transaction mode (the Debian package's, started by the
fixture): clients trigger and wait, ``fairlane worker --no-listen --prepare-threshold none``
processes drain 1,000 runs, a handler waits on a child and on a batch of children, and a
streamed batch is ingested and processed, with fewer server sessions than clients.

PgBouncer 1.18 (Debian 12) keeps no prepared statement across transactions, and no LISTEN:
every client here runs with ``prepare_threshold=None`` and without LISTEN."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, Client, RunStatus, TriggerRequest, Worker
from fairlane.batches import AsyncBatchClient
from tests.helpers import running, wait_until
from tests.helpers.batches import batch_row, chunked, ndjson
from tests.helpers.faults import local_ports
from tests.helpers.pgbouncer import POOL_SIZE, PgBouncer, pgbouncer_for
from tests.pgbouncer.tasks import tasks

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TASKS = "tests.pgbouncer.tasks:tasks"
DRAINED = 1_000


@pytest.fixture
def bouncer(db: psycopg.Connection[Any]) -> Iterator[PgBouncer]:
    with pgbouncer_for(db) as started:
        yield started


@pytest.fixture
def through(dsn: str, bouncer: PgBouncer) -> str:
    """The test database's DSN through PgBouncer."""
    return bouncer.dsn(dsn)


def statuses(db: psycopg.Connection[Any], run_ids: list[int]) -> dict[str, int]:
    rows = db.execute(
        "SELECT status, count(*) FROM fairlane.runs WHERE id = ANY(%s) GROUP BY status", (run_ids,)
    ).fetchall()
    return dict(rows)


def item_runs(db: psycopg.Connection[Any], batch_id: int) -> list[int]:
    rows = db.execute("SELECT id FROM fairlane.runs WHERE batch_id = %s", (batch_id,))
    return [run_id for (run_id,) in rows.fetchall()]


def server_sessions(db: psycopg.Connection[Any], bouncer: PgBouncer) -> int:
    """Backends of the test database whose client is PgBouncer: its server sessions."""
    assert bouncer.process is not None
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND client_port = ANY(%s)",
        (sorted(local_ports(bouncer.process.pid)),),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_fixture_runs_pgbouncer_in_transaction_mode(bouncer: PgBouncer) -> None:
    config = {row["key"]: row["value"] for row in bouncer.show("CONFIG")}
    assert config["pool_mode"] == "transaction"
    assert config["default_pool_size"] == str(POOL_SIZE)
    (version,) = bouncer.show("VERSION")
    assert str(next(iter(version.values()))).startswith("PgBouncer")


def test_client_triggers_reads_and_waits_through_pgbouncer(
    through: str, db: psycopg.Connection[Any]
) -> None:
    """Many more executions of each statement than psycopg's prepare threshold, on more client
    connections than PgBouncer has server sessions, and a wait that polls."""
    with Client(through, prepare_threshold=None, listen=False, max_connections=8) as client:
        # Threads so that several of the client's connections are in use at once.
        made: list[int] = []
        lock = threading.Lock()

        def trigger_some(first: int) -> None:
            for n in range(first, first + 15):
                run_id = client.trigger("echo", n, tags=["bounced"])
                with lock:
                    made.append(run_id)

        threads = [threading.Thread(target=trigger_some, args=(n * 100,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        made += client.trigger_many([TriggerRequest("echo", n) for n in range(10)])
        assert statuses(db, made) == {"QUEUED": 100}
        assert all(client.get_run(run_id).status is RunStatus.QUEUED for run_id in made[:20])
        assert client.count_by_status()["QUEUED"] == 100
        # Nothing runs it: the poll ends in the wait's timeout, within it.
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            client.wait_for_run(made[0], timeout=0.5, poll_interval=0.1)
        assert time.monotonic() - started < 5
        assert client._watcher is None, "a client with listen=False opened a LISTEN connection"


def test_worker_processes_drain_1000_runs_through_pgbouncer(
    through: str, db: psycopg.Connection[Any], bouncer: PgBouncer, tmp_path: Path
) -> None:
    """Two ``fairlane worker --burst --no-listen --prepare-threshold none`` processes, five or
    more connections each, share PgBouncer's four server sessions. Counted while both are
    started and draining: handlers of 50 ms make the drain outlast the second one's start (one
    worker alone drained 1,000 no-op runs before the other had connected)."""
    with Client(through, prepare_threshold=None) as client:
        run_ids = client.trigger_many([TriggerRequest("slow_echo", n) for n in range(DRAINED)])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "queue")])}
    command = [
        sys.executable,
        "-m",
        "fairlane.cli",
        "worker",
        TASKS,
        "--dsn",
        through,
        "--burst",
        "--json",
        "--no-listen",
        "--prepare-threshold",
        "none",
        "--concurrency",
        "20",
        "--poll-interval",
        "0.2",
    ]
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    workers = [
        subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=log.open("wb"))
        for log in logs
    ]
    most_sessions = most_clients = 0
    dbname = db.info.dbname
    try:
        deadline = time.monotonic() + 90
        while any(worker.poll() is None for worker in workers):
            # While both drain (a worker that exits may leave a session on its way out).
            if all(worker.poll() is None for worker in workers) and all(
                "started:" in log.read_text() for log in logs
            ):
                most_sessions = max(most_sessions, server_sessions(db, bouncer))
                clients = [row for row in bouncer.show("CLIENTS") if row["database"] == dbname]
                most_clients = max(most_clients, len(clients))
            assert time.monotonic() < deadline, "the workers did not drain the runs"
            time.sleep(0.05)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
    outputs = [worker.communicate()[0].decode() for worker in workers]
    for worker, log in zip(workers, logs, strict=True):
        assert worker.returncode == 0, log.read_text()
        assert "Traceback" not in log.read_text(), log.read_text()
    stats = [json.loads(output.strip().splitlines()[-1]) for output in outputs]
    assert sum(stat["completed"] for stat in stats) == DRAINED
    assert statuses(db, run_ids) == {"COMPLETED": DRAINED}
    rows = db.execute(
        "SELECT count(*) FILTER (WHERE attempts = 1 AND result = payload) FROM fairlane.runs"
        " WHERE id = ANY(%s)",
        (run_ids,),
    ).fetchone()
    assert rows == (DRAINED,)
    print(
        f"\n{DRAINED} runs drained through PgBouncer: up to {most_clients} client connections"
        f" on at most {most_sessions} server sessions"
    )
    # The workers' connections took turns on PgBouncer's few server sessions.
    assert 0 < most_sessions <= POOL_SIZE < most_clients, (most_sessions, most_clients)


async def test_trigger_and_wait_and_a_batch_wait_through_pgbouncer(
    through: str, db: psycopg.Connection[Any]
) -> None:
    worker = Worker(
        tasks,
        through,
        listen=False,
        prepare_threshold=None,
        poll_interval=0.1,
        periodic_interval=0.1,
    )
    async with (
        AsyncClient(through, prepare_threshold=None, listen=False) as client,
        running(worker),
    ):
        parents = [await client.trigger("parent", n * 10) for n in range(3)]
        for n, parent in enumerate(parents):
            run = await client.wait_for_run(parent, timeout=60, poll_interval=0.1)
            assert run.status is RunStatus.COMPLETED, run
            assert run.result == [n * 10, n * 10 + 1, n * 10 + 2, n * 10 + 3]
        opened = [loop.current for loop in worker.connections.values() if loop.current]
        assert opened
        assert all(conn.prepare_threshold is None for conn in opened)
    row = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE status = 'COMPLETED') FROM fairlane.runs"
    ).fetchone()
    # Three parents, four children each.
    assert row == (15, 15)


async def test_a_streamed_batch_through_pgbouncer(
    through: str, db: psycopg.Connection[Any]
) -> None:
    items = [{"task": "echo", "payload": n} for n in range(300)]
    worker = Worker(tasks, through, listen=False, prepare_threshold=None, poll_interval=0.1)
    async with (
        AsyncBatchClient(through, prepare_threshold=None) as batches,
        running(worker),
    ):
        batch = await batches.create("default", len(items))
        result = await batches.ingest(batch.id, chunked(ndjson(items), 1024))
        assert result.sealed
        # The batch completes once every item is a run; then the runs themselves.
        await wait_until(
            lambda: batch_row(db, batch.id)["status"] == "COMPLETED", within=60, what="the batch"
        )
        await wait_until(
            lambda: statuses(db, item_runs(db, batch.id)) == {"COMPLETED": len(items)},
            within=60,
            what="every item's run",
        )
    assert batch_row(db, batch.id)["succeeded"] == len(items)
    row = db.execute(
        "SELECT count(*) FILTER (WHERE status = 'COMPLETED' AND result = payload)"
        " FROM fairlane.runs WHERE batch_id = %s",
        (batch.id,),
    ).fetchone()
    assert row == (len(items),)
