"""The namespaces of a client: ``client.limits``, ``client.schedules``, ``client.tokens`` and
``client.workers``, the functions of fairlane.limits, fairlane.schedules,
fairlane.waitpoints.tokens and fairlane.workers
on the client's pool, with its guarantees (bounded, committed on return, a read or a change
that is safe to repeat repeated once on another connection after an outage).

Written once, for ``AsyncClient``, in fairlane.async_namespaces; fairlane.namespaces, for
``Client``, is generated from it by tools/async_to_sync.py. To change limits, schedules or
tokens inside a transaction of your own, call those functions with your connection instead.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, Unpack

from fairlane import limits, schedules, workers
from fairlane.durations import Duration
from fairlane.limits import EnvironmentChange, QueueChange, SchedulerChange
from fairlane.models import (
    EnvironmentSettings,
    QueueSettings,
    Schedule,
    SchedulerSettings,
    Token,
    UnservedTask,
    WorkerInfo,
)
from fairlane.waitpoints import tokens

if TYPE_CHECKING:
    from fairlane.async_client import AsyncClient
    from fairlane.worker.handles import Task

__all__ = ["AsyncLimits", "AsyncSchedules", "AsyncTokens", "AsyncWorkers"]


class AsyncLimits:
    """Caps, pauses, size limits, DRR knobs and the global rate limit
    (fairlane.limits: each change applies to the next claim)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def set_environment(
        self, name: str, **settings: Unpack[EnvironmentChange]
    ) -> EnvironmentSettings:
        """``concurrency_limit``, ``burst_factor``, ``paused``, ``size_limit`` of an
        environment; those left out keep their value."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: limits.set_environment_async(conn, name, schema=schema, **settings),
            repeatable=True,
        )

    async def set_queue(
        self, environment: str, name: str, **settings: Unpack[QueueChange]
    ) -> QueueSettings:
        """``concurrency_limit``, ``paused``, ``size_limit`` of a queue."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: limits.set_queue_async(conn, environment, name, schema=schema, **settings),
            repeatable=True,
        )

    async def set_scheduler(self, **settings: Unpack[SchedulerChange]) -> SchedulerSettings:
        """The DRR ``quantum`` and ``max_deficit``, ``global_concurrency_limit``,
        ``rate_limit_per_s`` and ``rate_burst``."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: limits.set_scheduler_async(conn, schema=schema, **settings),
            repeatable=True,
        )

    async def scheduler_settings(self) -> SchedulerSettings:
        schema = self._client.schema
        return await self._client._call(
            lambda conn: limits.scheduler_settings_async(conn, schema=schema), repeatable=True
        )

    async def table(self, *, include_carriers: bool = False) -> builtins.list[dict[str, Any]]:
        """Every queue with its caps, size limits and its running, queued and delayed counts;
        the batch carriers' queue (``__batches__``) only with ``include_carriers``."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: limits.limits_table_async(
                conn, include_carriers=include_carriers, schema=schema
            ),
            repeatable=True,
        )


class AsyncSchedules:
    """Cron schedules, per environment, keyed by ``external_id`` (fairlane.schedules)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(
        self,
        task: str | Task[Any, Any],
        cron: str,
        timezone: str = "UTC",
        *,
        external_id: str,
        payload: Any = None,
        environment: str = "default",
        **options: Any,
    ) -> Schedule:
        """Create or update the schedule ``external_id`` of ``environment``, as
        ``fairlane.schedules.create``."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: schedules.create_async(
                conn,
                task,
                cron,
                timezone,
                external_id=external_id,
                payload=payload,
                environment=environment,
                schema=schema,
                **options,
            ),
            repeatable=True,
        )

    async def get(self, external_id: str, *, environment: str = "default") -> Schedule:
        """Raises ``ScheduleNotFoundError`` for an unknown schedule."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: schedules.get_async(
                conn, external_id, environment=environment, schema=schema
            ),
            repeatable=True,
        )

    async def list(self, *, environment: str | None = None) -> builtins.list[Schedule]:
        """The schedules of ``environment``, or of every environment."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: schedules.list_schedules_async(
                conn, environment=environment, schema=schema
            ),
            repeatable=True,
        )

    async def pause(self, external_id: str, *, environment: str = "default") -> Schedule:
        """No tick fires until ``resume``; the ticks in between are skipped."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: schedules.pause_async(
                conn, external_id, environment=environment, schema=schema
            ),
            repeatable=True,
        )

    async def resume(self, external_id: str, *, environment: str = "default") -> Schedule:
        schema = self._client.schema
        return await self._client._call(
            lambda conn: schedules.resume_async(
                conn, external_id, environment=environment, schema=schema
            ),
            repeatable=True,
        )

    async def delete(self, external_id: str, *, environment: str = "default") -> None:
        schema = self._client.schema
        await self._client._call(
            lambda conn: schedules.delete_async(
                conn, external_id, environment=environment, schema=schema
            )
        )

    async def trigger(self, external_id: str, *, environment: str = "default") -> int:
        """Trigger the schedule's run now (its next tick is unchanged); returns the run id."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: schedules.trigger_async(
                conn, external_id, environment=environment, schema=schema
            )
        )


class AsyncTokens:
    """Waitpoints that code completes by hand (fairlane.waitpoints.tokens): a handler waits
    on one with ``ctx.wait_for_token``."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(
        self,
        *,
        idempotency_key: str | None = None,
        idempotency_ttl: Duration | None = None,
        timeout: Duration | None = None,  # noqa: ASYNC109 - stored on the token
    ) -> int:
        """A token's id; the same live idempotency key returns the same token."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: tokens.create_token_async(
                conn,
                idempotency_key=idempotency_key,
                idempotency_ttl=idempotency_ttl,
                timeout=timeout,
                schema=schema,
            ),
            repeatable=idempotency_key is not None,
        )

    async def complete(self, token_id: int, output: Any = None) -> bool:
        """Complete a token and wake whoever waits on it; False if it was already complete."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: tokens.complete_token_async(conn, token_id, output, schema=schema)
        )

    async def get(self, token_id: int) -> Token:
        """Raises ``WaitpointNotFoundError`` for an unknown token."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: tokens.get_token_async(conn, token_id, schema=schema), repeatable=True
        )


class AsyncWorkers:
    """The workers registry (fairlane.workers): the workers that registered, and the tasks
    with queued runs that no live worker serves."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self) -> builtins.list[WorkerInfo]:
        """Every registered worker, live ones first."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: workers.list_workers_async(conn, schema=schema), repeatable=True
        )

    async def unserved(
        self, *, limit: int = workers.DEFAULT_UNSERVED_LIMIT
    ) -> builtins.list[UnservedTask]:
        """The tasks, per environment, with QUEUED runs that no live worker serves, longest
        waiting first: at most ``limit``."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: workers.unserved_tasks_async(conn, limit=limit, schema=schema),
            repeatable=True,
        )

    async def serves(
        self, task: str, *, environment: str = "default", queue: str = "default"
    ) -> bool:
        """Whether a live worker serves ``task`` in ``environment`` and ``queue``."""
        schema = self._client.schema
        return await self._client._call(
            lambda conn: workers.task_served_async(
                conn, task, environment=environment, queue=queue, schema=schema
            ),
            repeatable=True,
        )
