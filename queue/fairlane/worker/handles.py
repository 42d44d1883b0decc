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
    from fairlane.triggering.api import AsyncConnectionLike, SyncConnection

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
        defaults filled in where ``options`` leave them out (or give None)."""
        given = {option: value for option, value in options.items() if value is not None}
        return TriggerRequest(
            self.name, self.encode(payload), **{**self.definition.trigger_defaults(), **given}
        )

    def trigger(
        self,
        target: SyncConnection | Client,
        payload: P,
        *,
        schema: str | None = None,
        **options: Any,
    ) -> int:
        """Trigger a run of this task; returns its id. ``target`` is a ``Client`` (committed on
        return) or your own connection or session (the run joins your transaction), as for
        ``fairlane.trigger``. ``options`` are ``TriggerRequest``'s."""
        from fairlane.client import Client
        from fairlane.triggering.api import trigger_many

        request = self.request(payload, **options)
        if isinstance(target, Client):
            return target.trigger_many([request])[0]
        return trigger_many(target, [request], schema=schema)[0]

    async def trigger_async(
        self,
        target: AsyncConnectionLike | AsyncClient,
        payload: P,
        *,
        schema: str | None = None,
        **options: Any,
    ) -> int:
        """The async twin of ``trigger``: an ``AsyncClient`` or your async connection or
        session."""
        from fairlane.async_client import AsyncClient
        from fairlane.triggering.api import trigger_many_async

        request = self.request(payload, **options)
        if isinstance(target, AsyncClient):
            return (await target.trigger_many([request]))[0]
        return (await trigger_many_async(target, [request], schema=schema))[0]

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
