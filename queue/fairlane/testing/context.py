"""The ``RunContext`` of an eager run: its waits end at once, in-process.

A child a handler triggers and waits for (``trigger_and_wait``, ``batch_trigger_and_wait``, a
task handle's ``trigger_and_wait``) runs right there, to its end, and the wait returns its
result. ``wait_for_runs`` returns the results of eager runs that finished. ``wait_until``
returns at once: eager mode does not make time pass. Tokens and streamed batches live in the
database: waiting for them raises ``EagerModeError``. A step (``ctx.step``) runs its function
and returns its result through JSON, as a worker's does; nothing is replayed in eager mode, so
it runs again in each attempt.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio

from fairlane.durations import seconds
from fairlane.errors import EagerModeError
from fairlane.payload import encode_json
from fairlane.triggering.request import TriggerRequest
from fairlane.waitpoints import WaitResult
from fairlane.worker.context import RunContext

if TYPE_CHECKING:
    from fairlane.testing.eager import EagerRuns


@dataclass(slots=True)
class EagerRunContext(RunContext):
    _eager: EagerRuns | None = field(default=None, repr=False)

    def _runs(self) -> EagerRuns:
        if self._eager is None:
            raise EagerModeError("an eager run's context needs its eager block")
        return self._eager

    async def trigger_request_and_wait(self, request: TriggerRequest) -> WaitResult:
        (result,) = await self._runs().run_children([request], self.run)
        return result

    async def batch_trigger_and_wait(self, requests: Sequence[TriggerRequest]) -> list[WaitResult]:
        return await self._runs().run_batch(list(requests), self.run)

    async def step(
        self, name: str, fn: Callable[..., Any], *args: Any, per_attempt: bool = False
    ) -> Any:
        value = fn(*args)
        if inspect.isawaitable(value):
            value = await value
        return json.loads(encode_json(value, what=f"step {name!r} result"))

    def _step_in_thread(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], per_attempt: bool
    ) -> Any:
        return json.loads(encode_json(fn(*args), what=f"step {name!r} result"))

    async def wait_for_runs(self, run_ids: Sequence[int]) -> list[WaitResult]:
        await anyio.lowlevel.checkpoint()
        return self._runs().results_of(run_ids, self.run.environment)

    async def wait_for_batch(self, batch_id: int) -> list[WaitResult]:
        raise EagerModeError(
            f"batch {batch_id}: batches live in the database; eager mode cannot wait for one "
            "(ctx.batch_trigger_and_wait runs its children eagerly)"
        )

    async def wait_until(self, when: datetime | float | timedelta) -> None:
        if not isinstance(when, datetime):
            seconds("wait_until", when)  # refused as the worker refuses it
        # The wait is over at once: eager mode does not make time pass.
        await anyio.lowlevel.checkpoint()

    async def wait_for_token(
        self,
        token_id: int,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the token's timeout, as the worker's
    ) -> WaitResult:
        raise EagerModeError(
            f"token {token_id}: tokens live in the database and are completed by other code; "
            "eager mode cannot wait for one"
        )
