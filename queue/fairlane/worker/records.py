"""The wait service's connections, and what a run's replay reads and its steps write over
them (the statements of sql/waitpoints/steps.sql; fairlane.worker.replay uses them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import psycopg

from fairlane.connection import ConnectionOptions
from fairlane.engine import engine
from fairlane.engine.journal import RecordedCall
from fairlane.engine.statement import first_async, rows_async
from fairlane.errors import LeaseLostError
from fairlane.worker.connections import LoopConnection
from fairlane.worker.replay import Replay

if TYPE_CHECKING:
    from fairlane.worker.run_state import ActiveRun
    from fairlane.worker.runs import RunTable

# The wait connections of a worker.
CONNECTIONS = 4


class CallRecords:
    """The base of ``WaitService``: its connections, a run's recorded calls read for its
    replay, and a step's outcome written under the run's lease."""

    def __init__(
        self, dsn: str, schema: str, runs: RunTable, options: ConnectionOptions | None
    ) -> None:
        self._journal = engine(schema).journal
        # Waits of different runs go over several connections (a run's always over the same
        # one): a wait is a transaction of several statements, and a worker whose runs all
        # start waiting at once would otherwise queue them all behind one connection.
        self._links = [(anyio.Lock(), LoopConnection(dsn, options)) for _ in range(CONNECTIONS)]
        # Told when a handler gives its slot up, takes one again, or lets go of its run.
        self._runs = runs

    @asynccontextmanager
    async def _use(self, run_id: int) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The run's wait connection, to itself while the block runs."""
        lock, connection = self._links[run_id % len(self._links)]
        async with lock, connection.use() as conn:
            yield conn

    async def close(self) -> None:
        for _, connection in self._links:
            await connection.close()

    async def replay_of(self, active: ActiveRun) -> Replay | None:
        """The run's recorded calls when it has any; read once per execution (the claim
        loop reads them for a whole claim at once: ``Worker._recorded_calls``)."""
        ctx = active.ctx
        if ctx._replay is None and active.run.replay and not ctx._replay_loaded:
            async with self._use(active.run.id) as conn:
                calls = await rows_async(conn, self._journal.recorded_calls([active.run.id]))
            self.attach_replay(active, calls)
        return ctx._replay

    def attach_replay(self, active: ActiveRun, calls: list[RecordedCall]) -> None:
        active.ctx._replay_loaded = True
        if calls:
            active.ctx._replay = Replay(active.run.id, calls)
            self._runs.stats.replays += 1

    def step_replayed(self) -> None:
        self._runs.stats.steps_replayed += 1

    async def record_step(
        self,
        active: ActiveRun,
        position: int,
        name: str,
        started_at: datetime,
        result_json: str | None,
        error_json: str | None,
    ) -> None:
        """A step's outcome, fenced by the lease (``LeaseLostError`` if it no longer holds)."""
        run_id = active.run.id
        statement = self._journal.record_step(
            run_id,
            active.lease.token,
            position,
            name,
            active.ctx.wait_attempt,
            status="FAILED" if error_json is not None else "COMPLETED",
            result_json=result_json,
            error_json=error_json,
            started_at=started_at,
        )
        self._runs.stats.steps_executed += 1
        async with self._use(run_id) as conn:
            written = await first_async(conn, statement)
        if written is None:
            raise LeaseLostError(run_id)
