"""Typed task handles: what ``@tasks.task()`` returns.

``Task[P, R]`` knows its task's name, its payload type ``P`` and result type ``R`` (from the
handler's annotations) and its trigger defaults (queue, priority, max_attempts,
max_duration). Triggering through it fills those defaults in, validates the payload (a
dataclass or pydantic model) and encodes it; ``trigger_and_wait`` inside a handler decodes the
child's result back into ``R``. Calling the handle calls the handler itself (unit tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fairlane.errors import RunFailedError
from fairlane.triggering.request import TriggerRequest
from fairlane.worker.context import RunContext
from fairlane.worker.registry import TaskDefinition

if TYPE_CHECKING:
    from fairlane.async_client import AsyncClient
    from fairlane.client import Client
    from fairlane.triggering.api import AsyncConnectionLike, ConnectionLike

P = TypeVar("P")
R = TypeVar("R")


class Task(Generic[P, R]):
    def __init__(self, definition: TaskDefinition) -> None:
        self.definition = definition
        self.name = definition.name

    def __repr__(self) -> str:
        return f"Task({self.name!r})"

    def __call__(self, ctx: RunContext, payload: P) -> Any:
        """Call the handler directly, as the worker would (without a worker: for unit tests).
        An async handler returns its coroutine."""
        return self.definition.handler(ctx, payload)

    # -- triggering ------------------------------------------------------------------------

    def encode(self, payload: P) -> Any:
        """The payload as stored: validated and converted to JSON values when the task's
        payload is a dataclass or pydantic model (``PayloadError`` when it does not fit)."""
        codec = self.definition.payload_codec
        return codec.encode(payload) if codec is not None else payload

    def request(self, payload: P, **options: Any) -> TriggerRequest:
        """A ``TriggerRequest`` for this task: the payload checked and encoded, the task's
        defaults filled in where ``options`` leave them out (or give None); a concurrency key
        the task works out from the payload, when ``options`` give none."""
        given = {option: value for option, value in options.items() if value is not None}
        key_of = self.definition.concurrency_key
        if "concurrency_key" not in given and key_of is not None and not isinstance(key_of, str):
            key = key_of(payload)
            if key is not None:
                given["concurrency_key"] = key
        return TriggerRequest(
            self.name, self.encode(payload), **{**self.definition.trigger_defaults(), **given}
        )

    # -- async, written once: the sync section below is generated from it ------------------

    async def trigger_async(
        self,
        target: AsyncConnectionLike | AsyncClient,
        payload: P,
        *,
        schema: str | None = None,
        **options: Any,
    ) -> int:
        """Trigger a run of this task; returns its id. ``target`` is a client (committed on
        return) or your own connection or session (the run joins your transaction), as for
        ``fairlane.trigger_async``. ``options`` are ``TriggerRequest``'s."""
        from fairlane.async_client import AsyncClient
        from fairlane.triggering.api import trigger_many_async

        requests = [self.request(payload, **options)]
        if isinstance(target, AsyncClient):
            ids = await target.trigger_many(requests)
        else:
            ids = await trigger_many_async(target, requests, schema=schema)
        return ids[0]

    # -- sync, generated from the async section above by tools/async_to_sync.py: do not edit

    def trigger(
        self,
        target: ConnectionLike | Client,
        payload: P,
        *,
        schema: str | None = None,
        **options: Any,
    ) -> int:
        """Trigger a run of this task; returns its id. ``target`` is a client (committed on
        return) or your own connection or session (the run joins your transaction), as for
        ``fairlane.trigger``. ``options`` are ``TriggerRequest``'s."""
        from fairlane.client import Client
        from fairlane.triggering.api import trigger_many

        requests = [self.request(payload, **options)]
        if isinstance(target, Client):
            ids = target.trigger_many(requests)
        else:
            ids = trigger_many(target, requests, schema=schema)
        return ids[0]

    # -- end of the generated sync section ---------------------------------------------------

    def requests(self, payloads: Sequence[P], **options: Any) -> list[TriggerRequest]:
        """One request per payload, for ``trigger_many`` or ``ctx.batch_trigger_and_wait``."""
        return [self.request(payload, **options) for payload in payloads]

    # -- inside a handler ------------------------------------------------------------------

    async def trigger_and_wait(self, ctx: RunContext, payload: P, **options: Any) -> R:
        """Inside a handler: trigger a child run of this task, wait for it without holding a
        slot (``ctx.trigger_and_wait``), and return its result as ``R``. A child that did not
        complete raises ``RunFailedError`` (its status and stored error)."""
        request = self.request(payload, **options)
        result = await ctx.trigger_request_and_wait(request)
        if not result.ok:
            error = result.error or {}
            status = str(error.get("status", "FAILED"))
            raise RunFailedError(result.run_id, status, error.get("error"))
        return self.decode_result(result.output)

    def decode_result(self, output: Any) -> R:
        """A stored result as ``R`` (validated, for a dataclass or pydantic result)."""
        codec = self.definition.result_codec
        return codec.decode(output) if codec is not None else output  # type: ignore[no-any-return]
