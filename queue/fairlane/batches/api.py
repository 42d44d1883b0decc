"""Batch triggers, phase one and reading: ``create_batch_async`` charges the environment's
token bucket with the run count (``BatchRateLimitedError`` carries the time to retry) and caps
it (``BatchTooLargeError``); ``get_batch_async`` and ``batch_items_async`` read a batch back;
``set_batch_limits_async`` overrides an environment's batch settings. Phase two, the items, is
``fairlane.batches.ingest``. Every function takes an async psycopg connection; a client's
``client.batches`` (fairlane.batches.client) runs them on a connection of its own.

The names without ``_async`` are the names before the naming convention (README, "Sync and
async"): they still work, with a ``DeprecationWarning``, and go in the next release.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import psycopg

from fairlane.config import schema_name
from fairlane.engine import engine
from fairlane.engine.statement import first_async, one_async, rows_async, run_async
from fairlane.errors import (
    BatchNotFoundError,
    BatchRateLimitedError,
    BatchTooLargeError,
    SettingError,
)
from fairlane.models import Batch, ItemRow

AsyncConn = psycopg.AsyncConnection[Any]
P = ParamSpec("P")
T = TypeVar("T")
INT32_MAX = 2**31 - 1
# The item size limit when the setting cannot be read.
DEFAULT_ITEM_MAX_BYTES = 3 * 1024 * 1024


async def get_batch_async(conn: AsyncConn, batch_id: int, *, schema: str | None = None) -> Batch:
    found = await first_async(conn, engine(schema_name(schema)).batches.get(batch_id))
    if found is None:
        raise BatchNotFoundError(batch_id)
    return found


async def batch_items_async(
    conn: AsyncConn, batch_id: int, *, schema: str | None = None
) -> list[ItemRow]:
    """Every item received (index, state, run id, error), by index."""
    return await rows_async(conn, engine(schema_name(schema)).batches.items(batch_id))


async def create_batch_async(
    conn: AsyncConn,
    environment: str,
    run_count: int,
    *,
    parent_run_id: int | None = None,
    idempotency_key: str | None = None,
    schema: str | None = None,
) -> Batch:
    """Phase one. With ``parent_run_id`` the batch gets a BATCH waitpoint the parent waits on
    (``ctx.wait_for_batch``). The same ``idempotency_key`` in the environment returns the
    existing batch, uncharged."""
    target = schema_name(schema)
    if isinstance(run_count, bool) or not isinstance(run_count, int):
        raise BatchTooLargeError(run_count, 0)
    # The statement takes an integer: a count past it is too many for any batch_max_items, and
    # sent clamped the statement answers TOO_MANY with the limit, as for any count too large.
    wanted = min(max(run_count, 0), INT32_MAX)
    statement = engine(target).batches.create(environment, wanted, parent_run_id, idempotency_key)
    created = await one_async(conn, statement)
    if created.outcome == "TOO_MANY":
        raise BatchTooLargeError(run_count, int(created.limit_value or 0))
    if created.outcome == "RATE_LIMITED":
        raise BatchRateLimitedError(environment, run_count, created.retry_after_s)
    assert created.batch_id is not None
    return await get_batch_async(conn, created.batch_id, schema=target)


def _check(
    setting: str, value: float | None, *, positive: bool = False, whole: bool = False
) -> None:
    if value is None:
        return
    wanted = ("positive" if positive else "non-negative") + (" whole" if whole else "")
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value < 0
        or (positive and value == 0)
        or (whole and value != int(value))
    ):
        raise SettingError(setting, value, f"must be a {wanted} number or None")


async def set_batch_limits_async(
    conn: AsyncConn,
    environment: str,
    *,
    refill_amount: float | None = None,
    refill_interval_s: float | None = None,
    bucket_max: float | None = None,
    concurrency: int | None = None,
    schema: str | None = None,
) -> None:
    """Per-environment overrides of the batch settings (None: the setting's default)."""
    _check("refill_amount", refill_amount)
    _check("refill_interval_s", refill_interval_s, positive=True)
    _check("bucket_max", bucket_max)
    _check("concurrency", concurrency, whole=True)
    batches = engine(schema_name(schema)).batches
    update = batches.update_limits(
        environment,
        refill_amount=refill_amount,
        refill_interval_s=refill_interval_s,
        bucket_max=bucket_max,
        concurrency=concurrency,
    )
    # The queue row before the environment's (the global lock order, docs/concurrency.md).
    async with conn.transaction():
        await run_async(conn, batches.sync_queue_concurrency(environment, concurrency))
        await run_async(conn, batches.ensure_environment(environment))
        await run_async(conn, update)


async def item_max_bytes(conn: AsyncConn, schema: str) -> int:
    found = await first_async(conn, engine(schema).batches.item_max_bytes())
    return int(found) if found is not None else DEFAULT_ITEM_MAX_BYTES


def renamed(
    new: Callable[P, Coroutine[Any, Any, T]], old: str
) -> Callable[P, Coroutine[Any, Any, T]]:
    """``new`` under its name before the naming convention, warning that the name goes."""

    @functools.wraps(new)
    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        warnings.warn(
            f"fairlane's {old} is now {new.__name__}; {old} goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return await new(*args, **kwargs)

    call.__name__ = call.__qualname__ = old
    return call


# The names before the naming convention, for one more release.
get_batch = renamed(get_batch_async, "get_batch")
batch_items = renamed(batch_items_async, "batch_items")
create_batch = renamed(create_batch_async, "create_batch")
set_batch_limits = renamed(set_batch_limits_async, "set_batch_limits")
