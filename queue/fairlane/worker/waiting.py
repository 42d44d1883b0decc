"""Waiting inside a handler: on child runs, on a time, on a token.

Each wait is one transaction on the worker's wait connection: find the waitpoints already at
this call position (a re-executed run finds the ones its first execution made), or make them
(trigger the children, create their run waitpoints lazily, link them), then give up the run's
slot (EXECUTING -> WAITING, fenced by the lease token). The handler then sleeps without holding
a slot, locally or in the database, until the resume channel (or a poll) says its waitpoints
completed; it takes a slot again through ``resume_run`` (same caps as a claim, ahead of fresh
work) and reads the results in call order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import psycopg

from fairlane.batches.parent import BATCH_EDGE, batch_results, make_parent_batch
from fairlane.durations import seconds
from fairlane.engine.sqlfiles import query
from fairlane.errors import (
    FairlaneError,
    LeaseLostError,
    RunNotFoundError,
    WaitpointNotFoundError,
)
from fairlane.triggering.api import trigger_many_async
from fairlane.triggering.request import TriggerRequest
from fairlane.waitpoints import WaitResult
from fairlane.worker.connections import LoopConnection

if TYPE_CHECKING:
    from fairlane.worker.executor import ActiveRun

log = logging.getLogger("fairlane.worker")

Edges = list[tuple[int, int]]  # (item, waitpoint id)


class WaitService:
    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        poll_interval: float,
        release_slot: Callable[[], None],
        reacquire_slot: Callable[[], Awaitable[None]],
    ) -> None:
        self._schema = schema
        self._connection = LoopConnection(dsn)
        self._listen_connection = LoopConnection(dsn)
        self._lock = anyio.Lock()
        self._poll_interval = poll_interval
        self._release_slot = release_slot
        self._reacquire_slot = reacquire_slot
        self._ready: dict[int, anyio.Event] = {}

    # -- the waits ---------------------------------------------------------------------

    async def trigger_and_wait(
        self, active: ActiveRun, position: int, request: TriggerRequest
    ) -> WaitResult:
        """One child, triggered in the wait's transaction (a full queue raises, as a trigger
        does)."""
        (child,) = _linked(active, [request])

        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            (run_id,) = await trigger_many_async(conn, [child], schema=self._schema)
            waitpoints = await self._run_waitpoints(conn, [run_id])
            return [(0, waitpoints[run_id])]

        ((_, result),) = await self._wait(active, position, make)
        return result

    async def batch_trigger_and_wait(
        self, active: ActiveRun, position: int, requests: Sequence[TriggerRequest]
    ) -> list[WaitResult]:
        """A batch of the parent's, with the item semantics of a streamed batch
        (fairlane.batches.parent)."""
        children = _linked(active, requests)
        made: list[int] = []

        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            batch_id, waitpoint = await make_parent_batch(
                conn, self._schema, children, active.run.id
            )
            made.append(batch_id)
            return [(BATCH_EDGE, waitpoint)]

        async def attach(conn: psycopg.AsyncConnection[Any]) -> None:
            await self._attach_to_batch(conn, made[0], active.run.id)

        return batch_results(await self._wait(active, position, make, attach))

    async def wait_for_runs(
        self, active: ActiveRun, position: int, run_ids: Sequence[int]
    ) -> list[WaitResult]:
        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            waitpoints = await self._run_waitpoints(conn, list(run_ids))
            return [(item, waitpoints[run_id]) for item, run_id in enumerate(run_ids)]

        return [result for _, result in await self._wait(active, position, make)]

    async def wait_until(
        self, active: ActiveRun, position: int, when: datetime | float | timedelta
    ) -> None:
        if isinstance(when, datetime):
            params: dict[str, Any] = {"at": when, "delay_s": None}
        else:
            params = {"at": None, "delay_s": seconds("wait_until", when)}

        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            cursor = await conn.execute(query("create_time_waitpoint", self._schema), params)
            row = await cursor.fetchone()
            assert row is not None
            return [(0, int(row[0]))]

        await self._wait(active, position, make)

    async def wait_for_token(
        self, active: ActiveRun, position: int, token_id: int, timeout_s: float | None
    ) -> WaitResult:
        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            if timeout_s is not None:
                params = {"id": token_id, "timeout_s": timeout_s}
                await conn.execute(query("token_timeout_at_most", self._schema), params)
            return [(0, token_id)]

        ((_, result),) = await self._wait(active, position, make)
        return result

    async def wait_for_batch(
        self, active: ActiveRun, position: int, batch_id: int
    ) -> list[WaitResult]:
        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            cursor = await conn.execute(
                query("batch_waitpoint", self._schema), {"batch_id": batch_id}
            )
            row = await cursor.fetchone()
            if row is None or row[0] is None:
                raise FairlaneError(
                    f"batch {batch_id} has no waitpoint: create it with parent_run_id"
                )
            return [(BATCH_EDGE, int(row[0]))]

        async def attach(conn: psycopg.AsyncConnection[Any]) -> None:
            await self._attach_to_batch(conn, batch_id, active.run.id)

        return batch_results(await self._wait(active, position, make, attach))

    async def _attach_to_batch(
        self, conn: psycopg.AsyncConnection[Any], batch_id: int, run_id: int
    ) -> None:
        """After the edge to the batch: a batch that has already ended attaches its items'
        runs to this wait now (one still going does when it ends)."""
        params = {"batch_id": batch_id, "run_id": run_id}
        await conn.execute(query("attach_batch_waiter", self._schema), params)

    # -- the machinery -----------------------------------------------------------------

    async def _wait(
        self,
        active: ActiveRun,
        position: int,
        make: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Edges]],
        after_edges: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None = None,
    ) -> list[tuple[int, WaitResult]]:
        # max_duration counts executing time only: the wait, and the statements around it,
        # are not the handler's.
        active.pause_deadline()
        try:
            return await self._wait_paused(active, position, make, after_edges)
        finally:
            active.resume_deadline()

    async def _wait_paused(
        self,
        active: ActiveRun,
        position: int,
        make: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Edges]],
        after_edges: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None,
    ) -> list[tuple[int, WaitResult]]:
        run_id, token = active.run.id, active.lease.token
        key = {"run_id": run_id, "position": position}
        # Registered before the wait commits, so a wake-up right after it is not missed.
        self._ready[run_id] = anyio.Event()
        async with self._lock:
            conn = await self._connection.get()
            async with conn.transaction():
                cursor = await conn.execute(query("wait_edges_at", self._schema), key)
                if not await cursor.fetchall():
                    edges = await make(conn)
                    waitpoint_ids = [waitpoint for _, waitpoint in edges]
                    params = {
                        **key,
                        "items": [item for item, _ in edges],
                        "waitpoint_ids": waitpoint_ids,
                    }
                    await self._lock_waitpoints(conn, waitpoint_ids)
                    await conn.execute(query("insert_wait_edges", self._schema), params)
                    if after_edges is not None:
                        await after_edges(conn)
                state = await self._scalar(
                    conn, "begin_waiting", {"run_id": run_id, "token": token}
                )
                if state == "LOST":
                    # Raised inside the transaction: the children this wait triggered and its
                    # edges roll back with it (the run was cancelled or re-claimed meanwhile).
                    raise LeaseLostError(run_id)
        if state == "WAITING":
            await self._suspend(run_id, token)
        return await self._results(key)

    async def _lock_waitpoints(
        self, conn: psycopg.AsyncConnection[Any], waitpoint_ids: list[int]
    ) -> None:
        cursor = await conn.execute(
            query("lock_waitpoints", self._schema), {"waitpoint_ids": waitpoint_ids}
        )
        found = {int(row[0]) for row in await cursor.fetchall()}
        missing = [waitpoint for waitpoint in waitpoint_ids if waitpoint not in found]
        if missing:
            raise WaitpointNotFoundError(missing[0])

    async def _run_waitpoints(
        self, conn: psycopg.AsyncConnection[Any], run_ids: list[int]
    ) -> dict[int, int]:
        params = {"run_ids": run_ids}
        await conn.execute(query("lock_awaited_runs", self._schema), params)
        cursor = await conn.execute(query("ensure_run_waitpoints", self._schema), params)
        waitpoints = {int(run): int(waitpoint) for run, waitpoint in await cursor.fetchall()}
        missing = [run_id for run_id in run_ids if run_id not in waitpoints]
        if missing:
            raise RunNotFoundError(missing[0])
        return waitpoints

    async def _suspend(self, run_id: int, token: Any) -> None:
        """Sleep without a slot until the run is ready, then take a slot again."""
        self._release_slot()
        params = {"run_id": run_id, "token": token}
        backoff = 0.02
        try:
            while True:
                event = self._ready.setdefault(run_id, anyio.Event())
                with anyio.move_on_after(self._poll_interval):
                    await event.wait()
                self._ready.pop(run_id, None)
                async with self._lock:
                    conn = await self._connection.get()
                    state = await self._scalar(conn, "resume_run", params)
                if state == "RESUMED":
                    return
                if state == "LOST":
                    raise LeaseLostError(run_id)
                if state == "NO_ROOM":
                    # Ready but every slot is taken: the room is reserved, try again soon.
                    await anyio.sleep(backoff)
                    backoff = min(backoff * 2, self._poll_interval)
        finally:
            self._ready.pop(run_id, None)
            with anyio.CancelScope(shield=True):
                await self._reacquire_slot()

    async def _results(self, key: dict[str, int]) -> list[tuple[int, WaitResult]]:
        """The results at this call position, by item."""
        async with self._lock:
            conn = await self._connection.get()
            cursor = await conn.execute(query("wait_results", self._schema), key)
            rows = await cursor.fetchall()
        return [
            (int(item), WaitResult.from_row(is_error, output, run))
            for item, _, is_error, output, run in rows
        ]

    async def _scalar(
        self, conn: psycopg.AsyncConnection[Any], name: str, params: dict[str, Any]
    ) -> Any:
        cursor = await conn.execute(query(name, self._schema), params)
        row = await cursor.fetchone()
        assert row is not None
        return row[0]

    # -- wake-ups ----------------------------------------------------------------------

    async def listen(self) -> None:
        """Wake waiting handlers when the resume channel names their run."""
        while True:
            try:
                conn = await self._listen_connection.get()
                await conn.execute(query("listen_resume_channel", self._schema))
                for event in list(self._ready.values()):
                    event.set()  # anything announced while we were not listening
                async for notification in conn.notifies():
                    waiter = self._ready.get(int(notification.payload))
                    if waiter is not None:
                        waiter.set()
            except psycopg.Error:
                log.warning("resume listener lost its connection; reconnecting", exc_info=True)
                await self._listen_connection.discard()
                await anyio.sleep(1.0)

    async def close(self) -> None:
        await self._connection.close()
        await self._listen_connection.close()


def _linked(active: ActiveRun, requests: Sequence[TriggerRequest]) -> list[TriggerRequest]:
    """Children know their parent: cancelling the parent reaches them, and idempotency scopes
    "run" and "attempt" key on it."""
    return [
        request if request.parent_run_id is not None
        else replace(request, parent_run_id=active.run.id, parent_attempt=active.run.attempt)
        for request in requests
    ]  # fmt: skip
