"""One LISTEN connection per server process, for every event stream it serves.

A stream never holds a database connection while it waits on its client: it subscribes an
inbox here, and the dispatcher, one task of the process with one connection of its own
outside the pool, LISTENs on the changes channel and puts each announced run id into the
inboxes that follow it. A run's stream is found by the id itself; for the streams of a tag or
a batch the router looks the announced runs up (``route_changed_runs``, one pooled read per
burst of notices, only while such a stream is open) and hands each to the streams of its tags
and batch in its environment.

The dispatcher starts with the first subscriber and a subscriber waits until it LISTENs, so a
stream that reads its first state after subscribing misses no change. A lost connection is
reopened; every inbox is then told to resync, since notices sent meanwhile are lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import psycopg

from fairlane.connection import Outage
from fairlane.engine import Engine
from fairlane.engine.statement import rows_async, run_async
from fairlane.errors import DatabaseUnavailable
from fairlane.web.realtime.inbox import Inbox, Scope

log = logging.getLogger("fairlane.web.realtime")

AsyncConn = psycopg.AsyncConnection[Any]
RECONNECT_DELAY_S = 1.0
# Ids waiting for the router beyond this are dropped and the tag and batch streams resync.
MAX_UNROUTED = 10_000


class Dispatcher:
    def __init__(
        self,
        dsn: str,
        engine: Engine,
        pooled: Callable[[], AbstractAsyncContextManager[AsyncConn]],
        *,
        listen_timeout: float = 10.0,
    ) -> None:
        self._dsn = dsn
        self._engine = engine
        self._pooled = pooled
        self._listen_timeout = listen_timeout
        self._runs: defaultdict[int, set[Inbox]] = defaultdict(set)
        self._routed: defaultdict[tuple[str, int | str], set[Inbox]] = defaultdict(set)
        self._unrouted: set[int] = set()
        self._route_ready = anyio.Event()
        self._listening = anyio.Event()
        self._task: asyncio.Task[None] | None = None
        self._count = 0

    @property
    def subscribers(self) -> int:
        """Inboxes subscribed now (a plain count: readable from another thread)."""
        return self._count

    @asynccontextmanager
    async def subscribed(self, scope: Scope) -> AsyncIterator[Inbox]:
        """An inbox for ``scope`` while the block runs; the LISTEN is in place when it starts."""
        inbox = Inbox(scope)
        self._start()
        listening = self._listening
        with anyio.move_on_after(self._listen_timeout):
            await listening.wait()
        if not listening.is_set():
            raise DatabaseUnavailable("the server could not listen for changes in time")
        holders = self._holders(scope)
        holders.add(inbox)
        self._count += 1
        try:
            yield inbox
        finally:
            self._count -= 1
            holders.discard(inbox)
            self._forget(scope, holders)

    def _holders(self, scope: Scope) -> set[Inbox]:
        if scope.kind == "run":
            assert isinstance(scope.target, int)
            return self._runs[scope.target]
        return self._routed[(scope.kind, scope.target)]

    def _forget(self, scope: Scope, holders: set[Inbox]) -> None:
        if holders:
            return
        if scope.kind == "run":
            self._runs.pop(int(scope.target), None)
        else:
            self._routed.pop((scope.kind, scope.target), None)

    def _start(self) -> None:
        if self._task is None or self._task.done():
            if self._task is not None:
                # A dispatcher that died listens no more: the next subscriber waits for its
                # successor's LISTEN.
                self._listening = anyio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(self._route)
            await self._listen()

    async def _listen(self) -> None:
        outage = Outage("realtime listener", log)
        reconnect = False
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True
                ) as conn:
                    await run_async(conn, self._engine.realtime.listen())
                    outage.recovered()
                    if reconnect:
                        self._resync_all()
                    self._listening.set()
                    # Not a statement, so not bounded: TCP keepalives find a silent peer.
                    async for notification in conn.notifies():
                        self._announce(notification.payload)
            except psycopg.Error as error:
                if self._listening.is_set():
                    self._listening = anyio.Event()
                reconnect = True
                outage.failed(error)
                await anyio.sleep(RECONNECT_DELAY_S)

    def _announce(self, payload: str) -> None:
        try:
            ids = [int(part) for part in payload.split(",")]
        except ValueError:
            log.warning("ignoring a malformed notice %r", payload[:100])
            return
        for run_id in ids:
            for inbox in self._runs.get(run_id, ()):
                inbox.put(run_id)
        if self._routed:
            if len(self._unrouted) + len(ids) > MAX_UNROUTED:
                self._unrouted.clear()
                self._resync(self._routed.values())
                return
            self._unrouted.update(ids)
            self._route_ready.set()

    async def _route(self) -> None:
        while True:
            await self._route_ready.wait()
            self._route_ready = anyio.Event()
            ids, self._unrouted = sorted(self._unrouted), set()
            if not ids or not self._routed:
                continue
            try:
                async with self._pooled() as conn:
                    places = await rows_async(conn, self._engine.realtime.places(ids))
            except (psycopg.Error, DatabaseUnavailable):
                log.warning("could not route %d changed runs; their streams resync", len(ids))
                self._resync(self._routed.values())
                continue
            for place in places:
                keys: list[tuple[str, int | str]] = [("tag", tag) for tag in place.tags]
                if place.batch_id is not None:
                    keys.append(("batch", place.batch_id))
                for key in keys:
                    for inbox in self._routed.get(key, ()):
                        if inbox.scope.covers(place.environment):
                            inbox.put(place.id)

    def _resync_all(self) -> None:
        self._resync(self._runs.values())
        self._resync(self._routed.values())

    @staticmethod
    def _resync(groups: Iterable[set[Inbox]]) -> None:
        for group in groups:
            for inbox in group:
                inbox.resync()
