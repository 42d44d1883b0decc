"""The fenced statements a worker runs: claim, heartbeat, complete, fail, release.

Each takes the connection to run on, so a worker can give each of its loops its own
connection and tests can drive the statements directly. Every write after the claim matches
id AND lease_token: whatever a worker whose lease lapsed sends, it changes nothing.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import set_json_loads

from fairlane.engine.rows import claimed_from_row
from fairlane.engine.sqlfiles import query
from fairlane.models import ClaimedRun

AsyncConn = psycopg.AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class Lease:
    run_id: int
    token: UUID


@dataclass(frozen=True, slots=True)
class Completion:
    lease: Lease
    result_json: str


@dataclass(frozen=True, slots=True)
class Failure:
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
        self._claim_connections: weakref.WeakSet[AsyncConn] = weakref.WeakSet()

    async def claim(
        self,
        conn: AsyncConn,
        limit: int,
        *,
        environments: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
        full_scan: bool = True,
    ) -> list[ClaimedRun]:
        """Claim up to ``limit`` runs. ``full_scan=False`` serves the environments already known
        to have work and looks for others only when they cannot fill the claim; a caller that
        uses it must ask for a full scan when it learns of new work (a notification)."""
        params = {
            "limit": limit,
            "lease_s": self.lease_seconds,
            "worker_id": self.worker_id,
            "environments": list(environments) if environments else None,
            "queues": list(queues) if queues else None,
            "full_scan": full_scan,
        }
        if conn not in self._claim_connections:
            set_json_loads(_loads_json, conn)
            self._claim_connections.add(conn)
        cursor = await conn.execute(query("claim_runs", self.schema), params)
        return [claimed_from_row(row) for row in await cursor.fetchall()]

    async def heartbeat(self, conn: AsyncConn, leases: Sequence[Lease]) -> set[int]:
        """Extend every lease in one statement; returns the run ids whose lease is lost."""
        if not leases:
            return set()
        params = {**_lease_arrays(leases), "lease_s": self.lease_seconds}
        cursor = await conn.execute(query("heartbeat_runs", self.schema), params)
        kept = {row[0] for row in await cursor.fetchall()}
        return {lease.run_id for lease in leases} - kept

    async def complete(self, conn: AsyncConn, items: Sequence[Completion]) -> set[int]:
        """Write results; returns the run ids the fence accepted."""
        if not items:
            return set()
        params = {
            **_lease_arrays([item.lease for item in items]),
            "results": [item.result_json for item in items],
        }
        cursor = await conn.execute(query("complete_runs", self.schema), params)
        return {row[0] for row in await cursor.fetchall()}

    async def fail(self, conn: AsyncConn, items: Sequence[Failure]) -> set[int]:
        """Write failures (retry or final); returns the run ids the fence accepted."""
        if not items:
            return set()
        params = {
            **_lease_arrays([item.lease for item in items]),
            "errors": [item.error_json for item in items],
            "next_statuses": [item.next_status for item in items],
            "retry_delays": [item.retry_delay_s for item in items],
        }
        cursor = await conn.execute(query("fail_runs", self.schema), params)
        return {row[0] for row in await cursor.fetchall()}

    async def release(self, conn: AsyncConn, leases: Sequence[Lease]) -> set[int]:
        """Hand runs back to QUEUED without counting the attempt; returns those released."""
        if not leases:
            return set()
        cursor = await conn.execute(query("release_runs", self.schema), _lease_arrays(leases))
        return {row[0] for row in await cursor.fetchall()}


def _lease_arrays(leases: Sequence[Lease]) -> dict[str, list[Any]]:
    return {"ids": [lease.run_id for lease in leases], "tokens": [lease.token for lease in leases]}
