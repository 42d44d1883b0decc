"""What a handler knows about the run it executes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.from_thread

from fairlane.errors import InputError
from fairlane.models import ClaimedRun
from fairlane.payload import encode_json
from fairlane.triggering.request import TriggerRequest
from fairlane.waitpoints import WaitResult
from fairlane.worker.metadata import RunMetadata

if TYPE_CHECKING:
    from fairlane.worker.replay import Replay
    from fairlane.worker.run_state import ActiveRun
    from fairlane.worker.waiting import WaitService

_EVENT_LOCK = threading.Lock()
T = TypeVar("T")


@dataclass(slots=True)
class RunContext:
    """Passed to every handler as its first argument.

    ``stop_requested`` is set when the worker wants the handler to stop: its lease was lost,
    the run timed out, or the worker is shutting down. Async handlers are cancelled outright;
    sync handlers run in threads and cannot be, so long ones should check it.
    """

    run: ClaimedRun
    worker_id: str
    stop_reason: str | None = None
    # The event is made on first use: most runs never look at it, and a threading.Event costs
    # a lock and a condition. ``_stopped`` remembers a stop asked for before anyone looked.
    _stop_event: threading.Event | None = field(default=None, init=False, repr=False)
    _stopped: bool = field(default=False, init=False, repr=False)

    @property
    def stop_requested(self) -> threading.Event:
        event = self._stop_event
        if event is None:
            # Handlers in threads may look while the worker's loop asks for the stop.
            with _EVENT_LOCK:
                if self._stop_event is None:
                    self._stop_event = threading.Event()
                    if self._stopped:
                        self._stop_event.set()
                event = self._stop_event
        return event

    def request_stop(self) -> None:
        """Set ``stop_requested`` (for the worker; handlers only read it)."""
        with _EVENT_LOCK:
            self._stopped = True
            event = self._stop_event
        if event is not None:
            event.set()

    # Told (on the worker's event loop) when the run's metadata gained unwritten fields.
    _metadata_sink: Callable[[RunContext], None] | None = field(default=None, repr=False)
    # Fields set since the writer last took them, and whether the sink was told of them.
    _metadata_pending: dict[str, Any] = field(default_factory=dict, repr=False)

    # ``ctx.metadata``, made on first use.
    _metadata_view: RunMetadata | None = field(default=None, init=False, repr=False)

    def set_metadata(self, **fields: Any) -> None:
        """Merge ``fields`` into the run's metadata (progress, counters, ...): ``ctx.metadata``
        has them at once, ``get_run`` once the worker wrote them. Writes are coalesced: the
        worker writes a run's pending fields at most every ``metadata_interval`` seconds, and
        always before the run's outcome, so a tight loop may call this freely. Every write is
        fenced by the run's lease token. Values must be JSON-serialisable (``PayloadError``).
        ``ctx.metadata.update(...)`` and ``ctx.metadata[key] = value`` do the same."""
        self._merge_metadata(fields)

    def _merge_metadata(self, fields: dict[str, Any]) -> None:
        if not fields:
            return
        encode_json(fields, what="metadata")
        with _EVENT_LOCK:
            first = not self._metadata_pending
            self._metadata_pending.update(fields)
            self.run.metadata.update(fields)
            if self._metadata_view is not None:
                self._metadata_view.absorb(fields)
        if first and self._metadata_sink is not None:
            self._metadata_sink(self)

    def take_metadata(self) -> dict[str, Any]:
        """The fields set since the last call (for the worker's writer)."""
        with _EVENT_LOCK:
            pending, self._metadata_pending = self._metadata_pending, {}
        return pending

    _waits: WaitService | None = field(default=None, repr=False)
    _active: ActiveRun | None = field(default=None, repr=False)
    # Steps and waits share one call position counter. Waits are keyed by wait attempt and
    # position, so a replayed handler finds its attempt's waits, and one retried after a
    # failure makes its own; steps by position (fairlane.worker.replay).
    _position: int = field(default=0, repr=False)
    # The calls the run recorded, once read (None: none, or not read yet).
    _replay: Replay | None = field(default=None, repr=False)
    _replay_loaded: bool = field(default=False, repr=False)

    @property
    def run_id(self) -> int:
        return self.run.id

    @property
    def attempt(self) -> int:
        """This attempt's number, from 1. Every claim counts one: a redelivery after a lapsed
        lease too (``max_attempts`` bounds them all)."""
        return self.run.attempt

    @property
    def wait_attempt(self) -> int:
        """The attempt whose waits this execution keeps: ``attempt``, unless this execution
        replays an attempt whose worker died (its lease lapsed), whose number it then is. The
        first attempt after a failure starts its own waits (new children, a new batch, a new
        timer); a replay finds the ones its attempt made. Idempotency scope ``attempt`` keys
        on it."""
        wait_attempt = self.run.wait_attempt
        return self.run.attempt if wait_attempt is None else wait_attempt

    @property
    def max_attempts(self) -> int:
        return self.run.max_attempts

    @property
    def is_last_attempt(self) -> bool:
        return self.run.attempt >= self.run.max_attempts

    @property
    def task(self) -> str:
        return self.run.task

    @property
    def environment(self) -> str:
        return self.run.environment

    @property
    def queue(self) -> str:
        return self.run.queue

    @property
    def metadata(self) -> RunMetadata:
        """The run's metadata: a dict whose writes (``update``, ``[key] = value``) merge into
        the stored metadata exactly as ``set_metadata`` does (fairlane.worker.metadata)."""
        view = self._metadata_view
        if view is None:
            with _EVENT_LOCK:
                if self._metadata_view is None:
                    self._metadata_view = RunMetadata(self.run.metadata, self._merge_metadata)
                view = self._metadata_view
        return view

    @metadata.setter
    def metadata(self, value: RunMetadata) -> None:
        # ``ctx.metadata |= {...}`` merges in place, then assigns the same object back.
        if value is not self._metadata_view:
            raise AttributeError(
                "ctx.metadata cannot be replaced: merge fields with ctx.metadata.update(...)"
            )

    @property
    def machine(self) -> str | None:
        return self.run.machine

    @property
    def lease_lost(self) -> bool:
        return self.stop_reason == "lease_lost"

    # -- steps and waiting ---------------------------------------------------------------

    def _next_wait(self) -> tuple[WaitService, ActiveRun, int]:
        if self._waits is None or self._active is None:
            raise InputError("waiting and steps need a run executed by a worker")
        position = self._position
        self._position += 1
        return self._waits, self._active, position

    async def step(
        self, name: str, fn: Callable[..., Any], *args: Any, per_attempt: bool = False
    ) -> Any:
        """Run ``fn(*args)`` (a function or a coroutine function) once for the run, and return
        its result as JSON gives it back: a replay of the handler (after a wait that let go of
        the worker, a crash, a retry) returns the recorded result without calling ``fn``. The
        result is written under the run's lease before this returns. A step that raises is
        recorded as failed and its error fails the attempt as the task's retry policy says;
        the next attempt runs it again. A completed step is kept across failed attempts unless
        ``per_attempt`` is set: then each attempt (``wait_attempt``) runs it once. ``fn`` runs
        again only if the worker dies (or loses the lease) after it returned and before its
        result was written (docs/durable-execution.md)."""
        from fairlane.worker.replay import run_step

        waits, active, position = self._next_wait()
        return await run_step(waits, active, position, name, fn, args, per_attempt=per_attempt)

    def _step_in_thread(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], per_attempt: bool
    ) -> Any:
        from fairlane.worker.replay import run_step_sync

        return run_step_sync(self, name, fn, args, per_attempt=per_attempt)

    @property
    def sync(self) -> SyncCalls:
        """The steps and waits for a sync handler (it runs in a thread of the worker):
        ``ctx.sync.step(...)``, ``ctx.sync.wait_for_token(...)`` and the others block the
        handler's thread, and replay as the async ones do."""
        return SyncCalls(self)

    async def trigger_and_wait(self, task: str, payload: Any = None, **options: Any) -> WaitResult:
        """Trigger a child run and wait for it without holding a slot; returns how it ended.
        The child is triggered as ``trigger`` would (a full queue raises
        ``QueueSizeLimitExceeded`` here)."""
        return await self.trigger_request_and_wait(TriggerRequest(task, payload, **options))

    async def trigger_request_and_wait(self, request: TriggerRequest) -> WaitResult:
        """``trigger_and_wait`` for a request built already (a task handle's)."""
        waits, active, position = self._next_wait()
        return await waits.trigger_and_wait(active, position, request)

    async def batch_trigger_and_wait(self, requests: Sequence[TriggerRequest]) -> list[WaitResult]:
        """Trigger child runs as a batch and wait, without holding a slot, until every one is
        final; one result per request, in order. As for a streamed batch: the requests share
        one environment, the batch is charged to its token bucket and item cap
        (``BatchRateLimitedError``, ``BatchTooLargeError``), and a request that cannot become a
        run becomes a pre-failed one (its result is an error) while the others go on."""
        waits, active, position = self._next_wait()
        return await waits.batch_trigger_and_wait(active, position, list(requests))

    async def wait_for_runs(self, run_ids: Sequence[int]) -> list[WaitResult]:
        """Wait for runs triggered elsewhere (several parents may wait on one run)."""
        waits, active, position = self._next_wait()
        return await waits.wait_for_runs(active, position, run_ids)

    async def wait_for_batch(self, batch_id: int) -> list[WaitResult]:
        """Wait, without a slot, until every item of a batch created with
        ``parent_run_id=ctx.run_id`` has a run and every one of those runs is final; one result
        per item, in index order. Items of an aborted batch that never became runs carry the
        batch's error (code ``BATCH_SEAL_TIMEOUT``)."""
        waits, active, position = self._next_wait()
        return await waits.wait_for_batch(active, position, batch_id)

    async def wait_until(self, when: datetime | float | timedelta) -> None:
        """Wait until a time (or for a number of seconds) without holding a slot."""
        waits, active, position = self._next_wait()
        await waits.wait_until(active, position, when)

    async def wait_for_token(
        self,
        token_id: int,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the token's timeout, kept in the database
    ) -> WaitResult:
        """Wait until code completes the token (``fairlane.waitpoints.complete_token``).

        With ``timeout``, the token completes with a WAITPOINT_TIMEOUT error after that many
        seconds unless completed first; the run waits without a slot either way.
        """
        waits, active, position = self._next_wait()
        return await waits.wait_for_token(active, position, token_id, timeout)


class SyncCalls:
    """``RunContext``'s steps and waits, called from a sync handler's thread: each runs the
    async call on the worker's event loop and blocks until it returns. A wait whose run lets go
    of the worker unwinds the handler from here as it does an async one."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    def step(self, name: str, fn: Callable[..., Any], *args: Any, per_attempt: bool = False) -> Any:
        """``ctx.step``: ``fn`` runs in the handler's thread, its record on the worker's loop."""
        return self._ctx._step_in_thread(name, fn, args, per_attempt)

    def trigger_and_wait(self, task: str, payload: Any = None, **options: Any) -> WaitResult:
        return _blocking(
            self._ctx.trigger_request_and_wait, TriggerRequest(task, payload, **options)
        )

    def trigger_request_and_wait(self, request: TriggerRequest) -> WaitResult:
        return _blocking(self._ctx.trigger_request_and_wait, request)

    def batch_trigger_and_wait(self, requests: Sequence[TriggerRequest]) -> list[WaitResult]:
        return _blocking(self._ctx.batch_trigger_and_wait, requests)

    def wait_for_runs(self, run_ids: Sequence[int]) -> list[WaitResult]:
        return _blocking(self._ctx.wait_for_runs, run_ids)

    def wait_for_batch(self, batch_id: int) -> list[WaitResult]:
        return _blocking(self._ctx.wait_for_batch, batch_id)

    def wait_until(self, when: datetime | float | timedelta) -> None:
        _blocking(self._ctx.wait_until, when)

    def wait_for_token(self, token_id: int, *, timeout: float | None = None) -> WaitResult:
        return _blocking(partial(self._ctx.wait_for_token, timeout=timeout), token_id)


def _blocking(call: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """Run ``call`` on the worker's loop from a handler's thread (anyio's worker threads
    know their loop)."""
    try:
        return anyio.from_thread.run(call, *args)
    except RuntimeError as error:
        if "event loop" not in str(error) and "thread" not in str(error):
            raise
        raise InputError("ctx.sync is for sync handlers, run in a worker's threads") from error
