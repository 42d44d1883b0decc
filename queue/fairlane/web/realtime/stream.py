"""One event stream (``text/event-stream``): a run's, a tag's or a batch's.

It subscribes its inbox first, then reads its state once with a pooled connection (given back
at once) and sends each run as a ``run`` event. From then on it waits on its inbox, holding no
connection: the runs it is told changed are re-read together in one short pooled read (a burst
of notices within ``COALESCE_S`` is one read) and each difference goes out as an event:

- ``status``: the run (as ``GET /api/v1/runs/{id}`` answers it) when its status changed;
- ``metadata``: ``{"id", "metadata"}`` when its metadata changed;
- ``result``: ``{"id", "status", "result", "error"}`` when it reached a final status;
- ``run``: a run the stream sees for the first time (a tag's or batch's new run);
- ``end``: a run's stream ends once its run has (or is gone); any stream ends after its
  lifetime, and an ``EventSource`` reconnects by itself, reading the state again.

An inbox that overflowed, or a listener that reconnected, makes the stream read its whole
state again and send what differs. ``: keep-alive`` comments go out every ``heartbeat_s`` of
silence, so proxies keep the connection and a client gone is noticed.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Send
from starlette.types import Scope as AsgiScope

from fairlane import control
from fairlane.control import RunFilter
from fairlane.engine.statement import drive_async, rows_async
from fairlane.models import Run
from fairlane.web.realtime.inbox import Inbox, Scope
from fairlane.web.serialize import run_json
from fairlane.web.state import WebState

COALESCE_S = 0.05
FIRST_STATE_RUNS = 100  # a tag's or batch's newest runs sent when its stream starts
KNOWN_RUNS = 1000  # the runs a stream remembers, to tell what changed
RETRY_MS = 2000


@dataclass(frozen=True, slots=True)
class Seen:
    status: str
    metadata: str  # a digest: the stream keeps no copy of a run's metadata


def _seen(run: Run) -> Seen:
    text = json.dumps(run.metadata, sort_keys=True, separators=(",", ":"))
    return Seen(str(run.status), hashlib.blake2b(text.encode(), digest_size=16).hexdigest())


def event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def differences(before: Seen | None, run: Run) -> Iterator[str]:
    now = _seen(run)
    if before is None:
        yield event("run", run_json(run))
    else:
        if now.status != before.status:
            yield event("status", run_json(run))
        if now.metadata != before.metadata:
            yield event("metadata", {"id": run.id, "metadata": run.metadata})
    if run.status.is_final and (before is None or before.status != now.status):
        data = {"id": run.id, "status": str(run.status), "result": run.result, "error": run.error}
        yield event("result", data)


class Follow:
    """What one stream knows, and its reads."""

    def __init__(self, state: WebState, scope: Scope) -> None:
        self.state = state
        self.scope = scope
        self.known: dict[int, Seen] = {}

    async def whole(self) -> list[Run]:
        scope, engine = self.scope, self.state.engine
        async with self.state.connection() as conn:
            if scope.kind == "run":
                return await rows_async(conn, engine.realtime.runs([int(scope.target)], None))
            if scope.kind == "batch":
                found = await rows_async(
                    conn, engine.realtime.batch_runs(int(scope.target), FIRST_STATE_RUNS)
                )
                return sorted((run for run in found if scope.covers(run.environment)), key=_by_id)
            filters = RunFilter(
                environment=scope.environment, tags=[str(scope.target)], limit=FIRST_STATE_RUNS
            )
            return sorted(await drive_async(conn, control.list_runs(engine, filters)), key=_by_id)

    async def changed(self, ids: frozenset[int]) -> list[Run]:
        statement = self.state.engine.realtime.runs(sorted(ids), self.scope.environment)
        async with self.state.connection() as conn:
            return await rows_async(conn, statement)

    def events(self, runs: list[Run]) -> Iterator[str]:
        for run in runs:
            yield from differences(self.known.pop(run.id, None), run)
            self.known[run.id] = _seen(run)
        while len(self.known) > KNOWN_RUNS:
            del self.known[next(iter(self.known))]

    def ended(self, runs: list[Run]) -> bool:
        """A run's stream ends with its run, or when the run is gone (pruned)."""
        if self.scope.kind != "run":
            return False
        return not runs or runs[0].status.is_final


def _by_id(run: Run) -> int:
    return run.id


class EventStream(Response):
    """The response: subscribed, first state read, then the stream until its end, its
    lifetime or its client's disconnect (Starlette cancels it), whichever comes first. What
    fails before the first byte (the database) answers as any request's error would."""

    media_type = "text/event-stream"

    def __init__(
        self,
        state: WebState,
        scope: Scope,
        place: AbstractContextManager[None],
        *,
        once: bool = False,
    ) -> None:
        super().__init__(status_code=200)
        self.state = state
        self.follow = Follow(state, scope)
        self.place = place
        self.once = once

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        with self.place:
            async with self.state.dispatcher.subscribed(self.follow.scope) as inbox:
                first = await self.follow.whole()
                stream = StreamingResponse(
                    self._events(first, inbox),
                    media_type=self.media_type,
                    headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
                )
                await stream(scope, receive, send)

    async def _events(self, first: list[Run], inbox: Inbox) -> AsyncIterator[str]:
        settings = self.state.stream_settings
        yield f"retry: {RETRY_MS}\n\n"
        for text in self.follow.events(first):
            yield text
        if self.once or self.follow.ended(first):
            yield event("end", {"reason": "once" if self.once else "final"})
            return
        deadline = time.monotonic() + settings.lifetime_s
        while (left := deadline - time.monotonic()) > 0:
            if not await inbox.wait(min(settings.heartbeat_s, left)):
                yield ": keep-alive\n\n"
                continue
            await anyio.sleep(COALESCE_S)
            taken = inbox.take()
            if taken.resync:
                runs = await self.follow.whole()
            else:
                runs = await self.follow.changed(taken.ids)
            for text in self.follow.events(runs):
                yield text
            if self.follow.ended(runs):
                yield event("end", {"reason": "final"})
                return
        yield event("end", {"reason": "lifetime"})
