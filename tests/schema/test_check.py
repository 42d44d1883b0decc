"""Workers, Clients and the CLI refuse a database whose schema is not this fairlane's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, Client, TaskRegistry, Worker
from fairlane.batches import AsyncBatchClient
from fairlane.errors import SchemaMismatchError
from fairlane.schema import migrate
from fairlane.schema.check import SCHEMA_REVISION, check_schema

UNMIGRATED = f"database schema is at none (not migrated), this fairlane needs {SCHEMA_REVISION}"


def test_an_unmigrated_database_is_refused_by_clients(empty_database: Any) -> None:
    dsn = empty_database()
    with Client(dsn) as client, pytest.raises(SchemaMismatchError) as refused:
        client.trigger("t")
    assert str(refused.value) == f"{UNMIGRATED}: run `fairlane migrate`"
    assert refused.value.found is None
    assert refused.value.needed == SCHEMA_REVISION


@pytest.mark.anyio
async def test_an_unmigrated_database_is_refused_by_async_clients(empty_database: Any) -> None:
    dsn = empty_database()
    async with AsyncClient(dsn) as client:
        with pytest.raises(SchemaMismatchError, match="not migrated"):
            await client.trigger("t")
    async with AsyncBatchClient(dsn) as batches:
        with pytest.raises(SchemaMismatchError, match="not migrated"):
            await batches.get(1)


def test_a_changed_object_and_a_newer_revision_are_refused(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    check_schema(db, "fairlane")
    db.execute("UPDATE fairlane.schema_objects SET checksum = 'x' WHERE name = 'claim_runs'")
    with pytest.raises(SchemaMismatchError, match=r"1 SQL objects differ .*\(claim_runs\)"):
        check_schema(db, "fairlane")
    db.execute("DELETE FROM fairlane.schema_objects WHERE name = 'claim_runs'")
    with pytest.raises(SchemaMismatchError, match=r"\(claim_runs\): run `fairlane migrate`"):
        check_schema(db, "fairlane")
    migrate.upgrade(dsn)
    check_schema(db, "fairlane")

    db.execute("UPDATE fairlane.fairlane_alembic_version SET version_num = '0099'")
    with pytest.raises(SchemaMismatchError) as newer:
        check_schema(db, "fairlane")
    assert newer.value.newer
    assert str(newer.value) == (
        f"database schema is at 0099, newer than this fairlane ({SCHEMA_REVISION}): "
        "upgrade fairlane"
    )


@pytest.mark.anyio
async def test_a_worker_refuses_to_start_on_an_unmigrated_database(empty_database: Any) -> None:
    worker = Worker(TaskRegistry(), empty_database(), poll_interval=0.05)
    with anyio.fail_after(10), pytest.raises(SchemaMismatchError, match="not migrated"):
        await worker.run()


@pytest.mark.anyio
async def test_a_worker_checks_again_when_it_reconnects(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    worker = Worker(TaskRegistry(), dsn, poll_interval=0.05, run_periodic_jobs=False)
    refused = pytest.RaisesExc(SchemaMismatchError, match="claim_runs")
    with anyio.fail_after(20), pytest.RaisesGroup(refused):
        async with anyio.create_task_group() as group:
            await group.start(worker.run)
            # Migrated under the worker (here: by hand) while its connections drop.
            db.execute(
                "UPDATE fairlane.schema_objects SET checksum = 'x' WHERE name = 'claim_runs'"
            )
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.mark.parametrize("command", [["status"], ["runs", "list"], ["worker", "probe_tasks:tasks"]])
def test_cli_commands_stop_with_one_line_and_exit_4(
    empty_database: Any, command: list[str], tmp_path: Path
) -> None:
    (tmp_path / "probe_tasks.py").write_text(
        "from fairlane import TaskRegistry\ntasks = TaskRegistry()\n"
    )
    dsn = empty_database()
    done = subprocess.run(
        [sys.executable, "-m", "fairlane.cli", *command, "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 4, done.stderr
    assert done.stderr.splitlines() == [f"error: {UNMIGRATED}: run `fairlane migrate`"]
