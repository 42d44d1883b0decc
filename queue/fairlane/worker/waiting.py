"""Waiting inside a handler: on child runs, on a time, on a token.

Each wait is one transaction on the worker's wait connection: find the waitpoints the run's
attempt already made at this call position (a run replayed after its worker died finds the ones
the attempt it replays made; an attempt after a failure has none of its own yet), or make them
(trigger the children, create their run waitpoints lazily, link them), then give up the run's
slot (EXECUTING -> WAITING, fenced by the lease token). The handler then sleeps without holding
a slot, locally or in the database, until the resume channel (or a poll) says its waitpoints
completed; it takes a slot again through ``resume_run`` (same caps as a claim, ahead of fresh
work) and reads the results in call order.

A wait kept in memory longer than ``keep_in_memory_s`` lets go of the run instead
(``detach_waiting_run``): the run waits with no lease, no heartbeat and no worker, the handler
is dropped (``Suspended``), and when the wait completes the run is queued again and replayed
by whichever worker claims it (fairlane.worker.replay): its recorded steps and waits return
what they returned, and the handler goes on from where it waited.
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
from fairlane.connection import ConnectionOptions
from fairlane.durations import seconds
from fairlane.engine import engine
from fairlane.engine.statement import first_async, one_async, rows_async, run_async
from fairlane.errors import (
    BatchWithoutWaitpointError,
    LeaseLostError,
    RunNotFoundError,
    WaitpointNotFoundError,
)
from fairlane.triggering.api import insert_runs_async
from fairlane.triggering.boundary import in_parent_environment
from fairlane.triggering.request import TriggerRequest
from fairlane.waitpoints import WaitResult
from fairlane.worker.records import CallRecords
from fairlane.worker.replay import Suspended
from fairlane.worker.run_state import WAITING as WAITING_STATE

if TYPE_CHECKING:
    from fairlane.worker.run_state import ActiveRun
    from fairlane.worker.runs import RunTable

log = logging.getLogger("fairlane.worker")

Edges = list[tuple[int, int]]  # (item, waitpoint id)


class WaitService(CallRecords):
    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        poll_interval: float,
        runs: RunTable,
        options: ConnectionOptions | None = None,
        keep_in_memory_s: float = 2.0,
    ) -> None:
        super().__init__(dsn, schema, runs, options)
        self._schema = schema
        self._waits = engine(schema).waits
        # How long a waiting handler is kept before its run lets go of the worker.
        self._keep_in_memory_s = keep_in_memory_s
        self._poll_interval = poll_interval
        self._ready: dict[int, anyio.Event] = {}

    # -- the waits ---------------------------------------------------------------------

    async def trigger_and_wait(
        self, active: ActiveRun, position: int, request: TriggerRequest
    ) -> WaitResult:
        """One child, triggered in the wait's transaction (a full queue raises, as a trigger
        does)."""
        (child,) = _linked(active, [request])

        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            (run_id,) = await insert_runs_async(conn, [child], schema=self._schema)
            waitpoints = await self._run_waitpoints(conn, [run_id])
            return [(0, waitpoints[run_id])]

        name = f"trigger_and_wait {child.task}"
        ((_, result),) = await self._wait(active, position, name, make)
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

        name = "batch_trigger_and_wait"
        return batch_results(await self._wait(active, position, name, make, attach))

    async def wait_for_runs(
        self, active: ActiveRun, position: int, run_ids: Sequence[int]
    ) -> list[WaitResult]:
        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            # Only runs of the waiter's environment: another's answers as a missing run.
            statement = self._waits.runs_in_environment(run_ids, active.run.environment)
            own = set(await rows_async(conn, statement))
            foreign = [run_id for run_id in run_ids if run_id not in own]
            if foreign:
                raise RunNotFoundError(foreign[0])
            waitpoints = await self._run_waitpoints(conn, list(run_ids))
            return [(item, waitpoints[run_id]) for item, run_id in enumerate(run_ids)]

        name = "wait_for_runs"
        return [result for _, result in await self._wait(active, position, name, make)]

    async def wait_until(
        self, active: ActiveRun, position: int, when: datetime | float | timedelta
    ) -> None:
        if isinstance(when, datetime):
            statement = self._waits.create_time_waitpoint(when, None)
        else:
            statement = self._waits.create_time_waitpoint(None, seconds("wait_until", when))

        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            return [(0, await one_async(conn, statement))]

        await self._wait(active, position, "wait_until", make)

    async def wait_for_token(
        self, active: ActiveRun, position: int, token_id: int, timeout_s: float | None
    ) -> WaitResult:
        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            token = await first_async(conn, self._waits.get_token(token_id))
            # A token made for another environment (through the HTTP API) answers as a missing
            # one; a token the library made carries none, and any run may wait on it.
            if token is None or token.environment not in (None, active.run.environment):
                raise WaitpointNotFoundError(token_id)
            if timeout_s is not None:
                await run_async(conn, self._waits.token_timeout_at_most(token_id, timeout_s))
            return [(0, token_id)]

        ((_, result),) = await self._wait(active, position, "wait_for_token", make)
        return result

    async def wait_for_batch(
        self, active: ActiveRun, position: int, batch_id: int
    ) -> list[WaitResult]:
        async def make(conn: psycopg.AsyncConnection[Any]) -> Edges:
            statement = self._waits.batch_waitpoint(batch_id, active.run.environment)
            waitpoint = await first_async(conn, statement)
            if waitpoint is None:
                raise BatchWithoutWaitpointError(batch_id)
            return [(BATCH_EDGE, waitpoint)]

        async def attach(conn: psycopg.AsyncConnection[Any]) -> None:
            await self._attach_to_batch(conn, batch_id, active.run.id)

        return batch_results(await self._wait(active, position, "wait_for_batch", make, attach))

    async def _attach_to_batch(
        self, conn: psycopg.AsyncConnection[Any], batch_id: int, run_id: int
    ) -> None:
        """After the edge to the batch: a batch that has already ended attaches its items'
        runs to this wait now (one still going does when it ends)."""
        await run_async(conn, self._waits.attach_to_batch(batch_id, run_id))

    # -- the machinery -----------------------------------------------------------------

    async def _wait(
        self,
        active: ActiveRun,
        position: int,
        name: str,
        make: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Edges]],
        after_edges: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None = None,
    ) -> list[tuple[int, WaitResult]]:
        replay = await self.replay_of(active)
        if replay is not None:
            # A replay: a wait of this attempt that completed returns its results at once.
            done = replay.completed_wait(position, name, active.ctx.wait_attempt)
            if done is not None:
                return done
        # max_duration counts executing time only: the wait, and the statements around it,
        # are not the handler's.
        active.pause_deadline()
        try:
            return await self._wait_paused(active, position, name, make, after_edges)
        finally:
            active.resume_deadline()

    async def _wait_paused(
        self,
        active: ActiveRun,
        position: int,
        name: str,
        make: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Edges]],
        after_edges: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None,
    ) -> list[tuple[int, WaitResult]]:
        run_id, token, attempt = active.run.id, active.lease.token, active.ctx.wait_attempt
        # Registered before the wait commits, so a wake-up right after it is not missed.
        self._ready[run_id] = anyio.Event()
        detached = False
        async with self._use(run_id) as conn, conn.transaction():
            if not await rows_async(conn, self._waits.edges_at(run_id, attempt, position)):
                await run_async(conn, self._journal.record_wait(run_id, position, name, attempt))
                edges = await make(conn)
                items = [item for item, _ in edges]
                waitpoint_ids = [waitpoint for _, waitpoint in edges]
                await self._lock_waitpoints(conn, waitpoint_ids)
                statement = self._waits.insert_edges(
                    run_id, attempt, position, items, waitpoint_ids
                )
                await run_async(conn, statement)
                if after_edges is not None:
                    await after_edges(conn)
            state = await one_async(conn, self._waits.begin_waiting(run_id, token))
            if state == "LOST":
                # Raised inside the transaction: the children this wait triggered and its
                # edges roll back with it (the run was cancelled or re-claimed meanwhile).
                raise LeaseLostError(run_id)
            if state == "WAITING" and self._keep_in_memory_s <= 0:
                # Kept in memory for no time at all: let go of the run in the same transaction.
                detach = self._journal.detach(run_id, token)
                detached = await one_async(conn, detach) == "DETACHED"
        if detached:
            self._ready.pop(run_id, None)
            self._runs.waiting(active)
            self._runs.detached(active)
            raise Suspended(run_id)
        if state == "WAITING":
            await self._suspend(active)
        return await self._results(run_id, attempt, position)

    async def _lock_waitpoints(
        self, conn: psycopg.AsyncConnection[Any], waitpoint_ids: list[int]
    ) -> None:
        found = set(await rows_async(conn, self._waits.lock_waitpoints(waitpoint_ids)))
        missing = [waitpoint for waitpoint in waitpoint_ids if waitpoint not in found]
        if missing:
            raise WaitpointNotFoundError(missing[0])

    async def _run_waitpoints(
        self, conn: psycopg.AsyncConnection[Any], run_ids: list[int]
    ) -> dict[int, int]:
        await run_async(conn, self._waits.lock_awaited_runs(run_ids))
        waitpoints = dict(await rows_async(conn, self._waits.ensure_run_waitpoints(run_ids)))
        missing = [run_id for run_id in run_ids if run_id not in waitpoints]
        if missing:
            raise RunNotFoundError(missing[0])
        return waitpoints

    async def _suspend(self, active: ActiveRun) -> None:
        """Sleep without a slot until the run is ready, then take a slot again; or, past
        ``keep_in_memory_s``, let go of the run and drop the handler (``Suspended``)."""
        run_id = active.run.id
        self._runs.waiting(active)
        resumed = False
        try:
            resumed = await self._sleep(active)
        finally:
            self._ready.pop(run_id, None)
            # Unless it let go of the run, the handler goes on (or unwinds) holding a slot.
            if active.state is WAITING_STATE:
                with anyio.CancelScope(shield=True):
                    await self._runs.resumed(active)
        if not resumed:
            raise Suspended(run_id)

    async def _sleep(self, active: ActiveRun) -> bool:
        """True once the run took a slot again, False once it let go of its worker (the run
        table was told: the run is this worker's no more)."""
        run_id, token = active.run.id, active.lease.token
        backoff = 0.02
        wait = self._poll_interval
        let_go_at = anyio.current_time() + self._keep_in_memory_s
        detachable = True
        while True:
            event = self._ready.setdefault(run_id, anyio.Event())
            left = let_go_at - anyio.current_time()
            if detachable and left <= 0:
                if await self._detach(active):
                    return False
                # Ready already: it resumes here, now.
                detachable, timeout = False, 0.0
            else:
                timeout = min(wait, left) if detachable else wait
            if timeout > 0:
                with anyio.move_on_after(timeout):
                    await event.wait()
            # A fresh event before the statement: a wake-up announced while it runs (the
            # run became ready just after the statement looked) sets it, and the next turn
            # asks again at once instead of sleeping a whole poll interval.
            self._ready[run_id] = anyio.Event()
            async with self._use(run_id) as conn:
                state = await one_async(conn, self._waits.resume(run_id, token))
            if state == "RESUMED":
                return True
            if state == "LOST":
                raise LeaseLostError(run_id)
            if state == "NO_ROOM":
                # Ready but every slot is taken: the room is reserved, ask again after the
                # backoff (no wake-up will come for it), sooner if one does.
                wait, backoff = backoff, min(backoff * 2, self._poll_interval)
            else:
                wait, backoff = self._poll_interval, 0.02

    async def _detach(self, active: ActiveRun) -> bool:
        """Let go of the run unless it is ready already (then False: resume it)."""
        run_id = active.run.id
        async with self._use(run_id) as conn:
            state = await one_async(conn, self._journal.detach(run_id, active.lease.token))
            if state == "DETACHED":
                # Told before anything else runs: the run may be queued and claimed again.
                self._runs.detached(active)
                return True
        if state == "LOST":
            raise LeaseLostError(run_id)
        return False

    async def _results(
        self, run_id: int, attempt: int, position: int
    ) -> list[tuple[int, WaitResult]]:
        """The results at this call position of the attempt, by item."""
        async with self._use(run_id) as conn:
            found = await rows_async(conn, self._waits.results(run_id, attempt, position))
        return [
            (row.item, WaitResult.from_row(row.is_error, row.output, row.run_id)) for row in found
        ]

    # -- wake-ups (fairlane.worker.notifier) ---------------------------------------------

    def resume(self, run_id: int) -> None:
        """The resume channel named ``run_id``: wake its handler if it waits here."""
        waiter = self._ready.get(run_id)
        if waiter is not None:
            waiter.set()

    def wake_all(self) -> None:
        """After the listener reconnected: anything may have been announced meanwhile."""
        for event in list(self._ready.values()):
            event.set()


def _linked(active: ActiveRun, requests: Sequence[TriggerRequest]) -> list[TriggerRequest]:
    """Children run in their parent's environment (``ForeignEnvironmentError`` for a request
    naming another) and know their parent: cancelling the parent reaches them, and
    idempotency scopes "run" and "attempt" key on it. Scope "attempt" keys on the attempt whose
    waits these are, so a replay after a crash finds the children of the attempt it replays."""
    attempt = active.ctx.wait_attempt
    return [
        request
        if request.parent_run_id is not None
        else replace(request, parent_run_id=active.run.id, parent_attempt=attempt)
        for request in in_parent_environment(active.run.environment, requests)
    ]
