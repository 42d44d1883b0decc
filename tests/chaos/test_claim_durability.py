"""A server crash right after a claim: the claimed run must still be the worker's when the
server comes back, or its handler, already running, would run a second time.

The WAL writer is slowed to its longest delay (10 s) and the worker runs no periodic jobs, so
nothing but the claim's own commit can flush the claim before the crash. A durable claim (the
default) waits for that flush before the worker sees the run; a fast claim
(``durable_claims=False``) does not, and is lost."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, Worker, trigger
from tests.helpers import running, wait_until
from tests.helpers.cluster import Cluster

pytestmark = [pytest.mark.anyio, pytest.mark.chaos, pytest.mark.timeout(120)]


@pytest.fixture
def slow_wal_writer(cluster: Cluster) -> Iterator[None]:
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        admin.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute("ALTER SYSTEM RESET wal_writer_delay")
            admin.execute("SELECT pg_reload_conf()")


def run_row(dsn: str, run_id: int) -> tuple[Any, ...]:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT status, lease_token, attempts FROM fairlane.runs WHERE id = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.usefixtures("slow_wal_writer")
@pytest.mark.parametrize("durable_claims", [True, False], ids=["durable", "fast"])
async def test_a_claim_survives_a_crash_right_after_it(
    chaos_dsn: str, cluster: Cluster, durable_claims: bool
) -> None:
    tasks = TaskRegistry()
    started: list[Any] = []
    first_started = anyio.Event()
    release = anyio.Event()

    @tasks.task("hold")
    async def hold(ctx: RunContext, payload: None) -> None:
        started.append(ctx.run.lease_token)
        first_started.set()
        await release.wait()

    with psycopg.connect(chaos_dsn, autocommit=True) as conn:
        run_id = trigger(conn, "hold")
    worker = Worker(
        tasks, chaos_dsn, lease_seconds=30, poll_interval=0.1, run_periodic_jobs=False,
        connect_timeout=2, statement_timeout=5, shutdown_grace=1, durable_claims=durable_claims,
    )  # fmt: skip
    async with running(worker):
        await first_started.wait()
        await anyio.to_thread.run_sync(cluster.restart, "immediate")
        status, token, attempts = await anyio.to_thread.run_sync(run_row, chaos_dsn, run_id)
        if durable_claims:
            # Still the running handler's: its outcome will be written under this lease.
            assert (status, token, attempts) == ("EXECUTING", started[0], 1)
        else:
            # The claim vanished with the crash: the run is QUEUED for anyone to claim again.
            assert (status, token, attempts) == ("QUEUED", None, 0)
        release.set()
        await wait_until(
            lambda: run_row(chaos_dsn, run_id)[0] == "COMPLETED", within=30,
            what="the run to complete",
        )  # fmt: skip
    assert len(started) == (1 if durable_claims else 2)
