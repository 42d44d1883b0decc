"""Eager mode: a trigger runs the task's handler at once, in-process, without a database.

``with fairlane.testing.eager(tasks) as runs:`` turns it on for the block (process-wide, see
``fairlane.triggering.eager``): every public trigger of a task of ``tasks`` returns only once
the run has ended, and ``runs`` (or a client's ``get_run`` / ``wait_for_run``) has it. What is
simulated and what is not is listed in docs/testing.md, "Eager mode"; in short, the worker's
decisions about a run are the worker's own code (payload and result codecs, ``AbortRun``,
``retry_on``/``dont_retry_on``, attempts, hooks, ``max_duration``), while whatever the database
decides (queues, limits, leases, delays, TTL, debounce, tokens, batches) is not simulated.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio

from fairlane.batches.parent import batch_environment
from fairlane.control import BATCH_ITEM_COULD_NOT_TRIGGER
from fairlane.errors import (
    EagerModeError,
    MaxDurationExceededError,
    PayloadError,
    RunNotFoundError,
    TriggerOptionError,
)
from fairlane.models import ClaimedRun, Run, RunStatus
from fairlane.testing.context import EagerRunContext
from fairlane.testing.records import (
    KEY_FREEING,
    WORKER_ID,
    EagerRecord,
    idempotency_key,
    run_blocking,
)
from fairlane.triggering import eager as switch
from fairlane.triggering.boundary import in_parent_environment
from fairlane.triggering.request import TriggerRequest, environment_of, insert_params
from fairlane.waitpoints import WaitResult
from fairlane.worker.executor import (
    call_handler,
    decode_payload,
    encode_result,
    error_document,
    failure_decision,
    run_hook,
)
from fairlane.worker.handles import Task
from fairlane.worker.registry import TaskDefinition, TaskRegistry

# Set while an eager handler runs: the triggers it makes itself never propagate its
# children's errors (a parent does not fail with a child in production either).
_in_handler: ContextVar[bool] = ContextVar("fairlane_eager_in_handler", default=False)


@contextmanager
def eager(registry: TaskRegistry, *, propagate: bool = False) -> Iterator[EagerRuns]:
    """Run the tasks of ``registry`` in-process at trigger time for the block. With
    ``propagate=True`` a trigger made outside a handler re-raises the error that ended its run
    (after recording it) instead of returning the run's id."""
    runs = EagerRuns(registry, propagate=propagate)
    switch.switch_on(runs)
    try:
        yield runs
    finally:
        switch.switch_off(runs)


class EagerRuns:
    """The runs of one eager block, in trigger order. Their ids are negative (-1, -2, ...):
    they never collide with a stored run's."""

    def __init__(self, registry: TaskRegistry, *, propagate: bool = False) -> None:
        self.registry = registry
        self.propagate = propagate
        self._lock = threading.Lock()
        self._records: dict[int, EagerRecord] = {}
        self._keys: dict[tuple[str, str, str], int] = {}

    # -- reading ---------------------------------------------------------------------------

    def get(self, run_id: int) -> Run:
        """The run, as ``Client.get_run`` returns it; ``RunNotFoundError`` if not of this block."""
        record = self._records.get(run_id)
        if record is None:
            raise RunNotFoundError(run_id)
        return record.run()

    def get_run(self, run_id: int) -> Run | None:
        record = self._records.get(run_id)
        return record.run() if record is not None else None

    def runs(self, task: str | Task[Any, Any] | None = None) -> list[Run]:
        """Every run of the block (of one task, by name or handle), in trigger order."""
        name = task.name if isinstance(task, Task) else task
        with self._lock:
            records = list(self._records.values())
        return [record.run() for record in records if name is None or record.task == name]

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs())

    def __len__(self) -> int:
        return len(self._records)

    # -- triggering (what the public trigger calls hand over) ------------------------------

    def trigger_many(self, requests: Sequence[TriggerRequest]) -> list[int]:
        return run_blocking(partial(self.trigger_many_async, requests))

    async def trigger_many_async(self, requests: Sequence[TriggerRequest]) -> list[int]:
        records, fresh = self._accept(requests, None)
        await self._execute_all(fresh, self._propagating())
        return [record.id for record in records]

    def _propagating(self) -> bool:
        return self.propagate and not _in_handler.get()

    # -- what an eager handler's context asks for ------------------------------------------

    async def run_children(
        self, requests: Sequence[TriggerRequest], parent: ClaimedRun
    ) -> list[WaitResult]:
        children = in_parent_environment(parent.environment, requests)
        records, fresh = self._accept(children, parent)
        await self._execute_all(fresh, propagate=False)
        return [record.wait_result() for record in records]

    async def run_batch(
        self, requests: list[TriggerRequest], parent: ClaimedRun
    ) -> list[WaitResult]:
        """As a parent's batch: one environment for all, and an item that cannot trigger
        becomes a pre-failed run (BATCH_ITEM_COULD_NOT_TRIGGER) while the others go on."""
        requests = in_parent_environment(parent.environment, requests)
        if requests:
            batch_environment(requests)
        records: list[EagerRecord] = []
        fresh: list[EagerRecord] = []
        for request in requests:
            try:
                made, new = self._accept([request], parent)
            except (TriggerOptionError, PayloadError) as refused:
                made, new = [self._pre_failed(request, parent, str(refused))], []
            records += made
            fresh += new
        await self._execute_all(fresh, propagate=False)
        return [record.wait_result() for record in records]

    def results_of(self, run_ids: Sequence[int], environment: str) -> list[WaitResult]:
        """The results of ``run_ids``, runs of ``environment`` (another's answer as missing)."""
        results = []
        for run_id in run_ids:
            record = self._records.get(run_id)
            if record is None or record.environment != environment:
                raise EagerModeError(f"run {run_id} is not a run of this eager block")
            if not record.status.is_final:
                raise EagerModeError(
                    f"run {run_id} has not finished ({record.status}): in eager mode a run "
                    "can only wait for runs that ended"
                )
            results.append(record.wait_result())
        return results

    # -- accepting requests ----------------------------------------------------------------

    def _definition(self, request: TriggerRequest) -> TaskDefinition:
        if request.debounce is not None:
            raise EagerModeError(
                f"task {request.task!r}: debounce is not simulated in eager mode (it delays "
                "and merges runs); test it with a database and a worker"
            )
        return self.registry.get(request.task)  # UnknownTaskError

    def _accept(
        self, requests: Sequence[TriggerRequest], parent: ClaimedRun | None
    ) -> tuple[list[EagerRecord], list[EagerRecord]]:
        """(a record per request, the new ones among them) after the checks a trigger makes,
        all before any run: a refused request (with its index) makes none."""
        for request in requests:
            self._definition(request)
        insert_params(requests)
        keys = [idempotency_key(request, parent) for request in requests]
        records: list[EagerRecord] = []
        fresh: list[EagerRecord] = []
        with self._lock:
            for request, key in zip(requests, keys, strict=True):
                found = self._keyed(request, key)
                if found is not None:
                    records.append(found)
                    continue
                record = EagerRecord.of(-len(self._records) - 1, request, key)
                if parent is not None and record.parent_run_id is None:
                    record.parent_run_id = parent.id
                self._records[record.id] = record
                if key is not None:
                    self._keys[(environment_of(request), request.task, key)] = record.id
                records.append(record)
                fresh.append(record)
        return records, fresh

    def _keyed(self, request: TriggerRequest, key: str | None) -> EagerRecord | None:
        """The run an active idempotency key leads to (a failed run frees its key)."""
        if key is None:
            return None
        run_id = self._keys.get((environment_of(request), request.task, key))
        record = self._records.get(run_id) if run_id is not None else None
        if record is None or record.status in KEY_FREEING:
            return None
        return record

    def _pre_failed(self, request: TriggerRequest, parent: ClaimedRun, reason: str) -> EagerRecord:
        with self._lock:
            record = EagerRecord.pre_failed(
                -len(self._records) - 1, request, parent.id, BATCH_ITEM_COULD_NOT_TRIGGER, reason
            )
            self._records[record.id] = record
        return record

    # -- executing -------------------------------------------------------------------------

    async def _execute_all(self, records: Sequence[EagerRecord], propagate: bool) -> None:
        for record in records:
            error = await self._execute(record)
            if error is not None and propagate:
                raise error

    async def _execute(self, record: EagerRecord) -> BaseException | None:
        """Run every attempt the task's policy allows, at once (a retry's backoff is not
        waited for); returns the error that ended the run badly, if one did."""
        definition = self.registry.get(record.task)
        limiter = anyio.to_thread.current_default_thread_limiter()
        record.status, record.started_at = RunStatus.EXECUTING, datetime.now(UTC)
        marked = _in_handler.set(True)
        try:
            while True:
                record.attempts += 1
                ctx = EagerRunContext(run=record.claimed(), worker_id=WORKER_ID, _eager=self)
                retry, error = await self._attempt(record, definition, ctx, limiter)
                if not retry:
                    return error
        finally:
            _in_handler.reset(marked)

    async def _attempt(
        self,
        record: EagerRecord,
        definition: TaskDefinition,
        ctx: EagerRunContext,
        limiter: anyio.CapacityLimiter,
    ) -> tuple[bool, BaseException | None]:
        """One attempt, decided as the worker's executor decides: (retry, the final error)."""
        error: BaseException | None = None
        result: Any = None
        invalid_payload = False
        with anyio.CancelScope() as scope:
            if record.max_duration_s is not None:
                scope.deadline = anyio.current_time() + record.max_duration_s
            try:
                payload = decode_payload(ctx.run, definition)
            except PayloadError as invalid:
                error, invalid_payload = invalid, True
            else:
                try:
                    result = await call_handler(definition, ctx, payload, limiter)
                except Exception as raised:
                    error = raised
        if scope.cancelled_caught:
            ctx.request_stop()
            timeout = MaxDurationExceededError(
                f"run exceeded max_duration of {record.max_duration_s}s"
            )
            await self._final(
                record,
                ctx,
                definition,
                timeout,
                RunStatus.TIMED_OUT,
                "MAX_DURATION_EXCEEDED",
                limiter,
            )
            return False, timeout
        if error is None:
            try:
                stored = encode_result(definition, result)
            except PayloadError as bad_result:
                error = bad_result
            else:
                await run_hook(definition.on_success, ctx, result, limiter)
                record.finish(RunStatus.COMPLETED, result=json.loads(stored))
                return False, None
        if invalid_payload:
            await self._final(
                record, ctx, definition, error, RunStatus.FAILED, "INVALID_PAYLOAD", limiter
            )
            return False, error
        status, code, _delay = failure_decision(ctx.run, error, definition)
        if status is RunStatus.DELAYED:
            record.attempt_failed(error_document(error, record.attempts, code))
            return True, None
        await self._final(record, ctx, definition, error, status, code, limiter)
        return False, error

    async def _final(
        self,
        record: EagerRecord,
        ctx: EagerRunContext,
        definition: TaskDefinition,
        error: BaseException,
        status: RunStatus,
        code: str | None,
        limiter: anyio.CapacityLimiter,
    ) -> None:
        await run_hook(definition.on_failure, ctx, error, limiter)
        record.finish(status, error=error_document(error, record.attempts, code))
