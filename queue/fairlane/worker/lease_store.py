"""A worker's side of its leases: the claim that takes them (sql/claim/claim.sql), and
the heartbeat and fenced writes that keep and end them (sql/leases/outcomes.sql).

Each method takes the connection to run on, so a worker can give each of its loops its own
connection and tests can drive the statements directly. Every write after the claim matches
id AND lease_token: whatever a worker whose lease lapsed sends, it changes nothing.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.types.json import set_json_loads

from fairlane.engine import engine
from fairlane.engine.claim import ClaimFloorArrays
from fairlane.engine.statement import rows_async
from fairlane.models import ClaimedRun

AsyncConn = psycopg.AsyncConnection[Any]


class Lease(NamedTuple):
    """A run's lease as this worker holds it. The value types here are named tuples: several
    are made per run, and a frozen dataclass is built at a third of the speed."""

    run_id: int
    token: UUID

    def __hash__(self) -> int:
        # Equal leases share their run id; hashing the token too went through UUID's Python
        # __hash__, three times per run in the writer's bookkeeping. (Tuple equality compares
        # the very same token objects by identity first, so it rarely reaches UUID's __eq__.)
        return hash(self[0])


class Completion(NamedTuple):
    lease: Lease
    result_json: str


class Failure(NamedTuple):
    lease: Lease
    error_json: str
    # DELAYED for a retry after ``retry_delay_s``, else the final status (FAILED, TIMED_OUT).
    next_status: str
    retry_delay_s: float | None


def _loads_json(data: str | bytes) -> Any:
    """``json.loads`` that answers the commonest claimed values (no payload, no metadata)
    without parsing them: every claimed row carries two jsonb columns."""
    if data in (b"{}", "{}"):
        return {}
    if data in (b"null", "null"):
        return None
    return json.loads(data)


class LeaseStore:
    def __init__(self, schema: str, *, lease_seconds: float, worker_id: str) -> None:
        self.schema = schema
        self.lease_seconds = lease_seconds
        self.worker_id = worker_id
        self._engine = engine(schema)
        self._claim_connections: weakref.WeakSet[AsyncConn] = weakref.WeakSet()
        # Runs per environment the last claim that got any got: the next claim reads that
        # many fewer environments in its first page (sql/claim/claim.sql, last_yield).
        self._last_yield: float | None = None
        # Where the last claim found the turn order's first environment: the next claim reads
        # the turn order from there, past the dead entries of the environments charged since
        # the last vacuum (sql/claim/claim.sql, turn_start). Kept while claims come back full,
        # as floors are (worker/claim_floors.py): an environment that sorts before it unheard
        # of (one another worker let join in a race with a charge) is read by the next claim
        # without it, a full scan or the claim after a short one. A claim that fails drops it.
        self._turn_start: str | None = None

    async def claim(
        self,
        conn: AsyncConn,
        limit: int,
        *,
        environments: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
        full_scan: bool = True,
        floors: ClaimFloorArrays | None = None,
        tasks: Sequence[str] | None = None,
        announced: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        """Claim up to ``limit`` runs. ``full_scan=False`` serves the environments already known
        to have work and looks for others only when they cannot fill the claim; a caller that
        uses it must ask for a full scan when it learns of new work (a notification).
        ``floors`` (worker/claim_floors.py) start each queue's walk after the last run claimed
        there; a caller that sends them must also claim without them now and then.
        ``tasks``: claim only runs of these tasks (None: any); a worker sends every task it
        has a handler for, its built-in ones included. ``announced``: environments a
        notification said gained work, looked at before serving (without a full scan)."""
        statement = self._engine.claim.runs(
            limit,
            lease_s=self.lease_seconds,
            worker_id=self.worker_id,
            environments=environments,
            queues=queues,
            full_scan=full_scan,
            floors=floors,
            tasks=tasks,
            announced=announced,
            last_yield=self._last_yield,
            turn_start=None if full_scan else self._turn_start,
        )
        self._turn_start = None
        if conn not in self._claim_connections:
            set_json_loads(_loads_json, conn)
            self._claim_connections.add(conn)
        rows = await rows_async(conn, statement)
        claimed = [run for run, _ in rows]
        if claimed:
            self._last_yield = len(claimed) / len({run.environment for run in claimed})
        self._turn_start = rows[-1][1] if len(rows) >= limit else None
        return claimed

    async def due_delayed(
        self,
        conn: AsyncConn,
        *,
        environments: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
        tasks: Sequence[str] | None = None,
    ) -> bool:
        """Whether DELAYED runs there are due and only wait for the promotion job."""
        statement = self._engine.claim.due_delayed(environments, queues, tasks)
        found = await rows_async(conn, statement)
        return bool(found and found[0])

    async def heartbeat(self, conn: AsyncConn, leases: Sequence[Lease]) -> set[int]:
        """Extend every lease in one statement; returns the run ids whose lease is lost."""
        if not leases:
            return set()
        ids, tokens = _lease_arrays(leases)
        kept = set(
            await rows_async(conn, self._engine.leases.heartbeat(ids, tokens, self.lease_seconds))
        )
        return {lease.run_id for lease in leases} - kept

    async def complete(self, conn: AsyncConn, items: Sequence[Completion]) -> set[int]:
        """Write results; returns the run ids the fence accepted."""
        if not items:
            return set()
        ids, tokens = _lease_arrays([item.lease for item in items])
        results = [item.result_json for item in items]
        return set(await rows_async(conn, self._engine.leases.complete(ids, tokens, results)))

    async def fail(self, conn: AsyncConn, items: Sequence[Failure]) -> set[int]:
        """Write failures (retry or final); returns the run ids the fence accepted."""
        if not items:
            return set()
        ids, tokens = _lease_arrays([item.lease for item in items])
        statement = self._engine.leases.fail(
            ids,
            tokens,
            [item.error_json for item in items],
            [item.next_status for item in items],
            [item.retry_delay_s for item in items],
        )
        return set(await rows_async(conn, statement))

    async def set_metadata(self, conn: AsyncConn, patches: Sequence[tuple[Lease, str]]) -> set[int]:
        """Merge metadata patches (JSON objects) into held runs; returns the run ids the fence
        accepted."""
        if not patches:
            return set()
        ids, tokens = _lease_arrays([lease for lease, _ in patches])
        statement = self._engine.leases.set_metadata(ids, tokens, [patch for _, patch in patches])
        return set(await rows_async(conn, statement))

    async def release(self, conn: AsyncConn, leases: Sequence[Lease]) -> set[int]:
        """Hand runs back to QUEUED without counting the attempt; returns those released."""
        if not leases:
            return set()
        ids, tokens = _lease_arrays(leases)
        return set(await rows_async(conn, self._engine.leases.release(ids, tokens)))


def _lease_arrays(leases: Sequence[Lease]) -> tuple[list[int], list[UUID]]:
    return [lease.run_id for lease in leases], [lease.token for lease in leases]
