"""What ``Client`` and ``AsyncClient`` share besides their generated code: the checks of
their arguments and filters, and whether a failed call is repeated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg_pool import PoolTimeout

from fairlane.config import database_url, psycopg_dsn
from fairlane.connection import ConnectionOptions, check_dsn, connect_timeout_for
from fairlane.control import RunFilter
from fairlane.errors import ConfigurationError, DatabaseTimeout, DatabaseUnavailable
from fairlane.triggering.request import TriggerRequest

# Connections a client's own pool holds at most.
DEFAULT_MAX_CONNECTIONS = 4


def run_filter(filters: RunFilter | None, by: dict[str, Any]) -> RunFilter:
    if filters is not None and by:
        raise ConfigurationError("pass a RunFilter or filter keywords, not both")
    return filters or RunFilter(**by)


def bulk_filter(filters: RunFilter | None, by: dict[str, Any]) -> RunFilter:
    """A bulk action's filter; an empty one would take every run, so it must say ``all=True``."""
    take_all = bool(by.pop("all", False))
    chosen = run_filter(filters, by)
    if chosen.is_empty and not take_all:
        raise ConfigurationError("a bulk action needs a filter, or all=True for every run")
    return chosen


def client_options(
    dsn: str | None,
    pool: object | None,
    max_connections: int,
    *,
    connect_timeout: float | None,
    **timeouts: Any,
) -> tuple[str | None, ConnectionOptions]:
    """The checks both clients make of their arguments: the client's DSN (None with a pool
    of the caller's) and connection options. A ``connect_timeout`` of None is the DSN's own,
    else the default."""
    if dsn is not None and pool is not None:
        raise ConfigurationError("pass a dsn or a pool, not both")
    if isinstance(max_connections, bool) or not isinstance(max_connections, int):
        raise ConfigurationError(f"max_connections must be an integer, not {max_connections!r}")
    if max_connections < 1:
        raise ConfigurationError(f"max_connections must be at least 1, not {max_connections}")
    checked = None if pool is not None else check_dsn(psycopg_dsn(database_url(dsn)))
    options = ConnectionOptions(
        application_name="fairlane client",
        connect_timeout=connect_timeout_for(checked, connect_timeout),
        **timeouts,
    )
    return checked, options


def keyed_only(requests: Sequence[TriggerRequest]) -> bool:
    """Whether repeating the trigger is harmless: every request has an idempotency key, so a
    repeat finds the runs the first attempt made, if it made them."""
    return all(request.idempotency_key is not None for request in requests)


def retry_once(failure: DatabaseUnavailable, repeatable: bool) -> bool:
    """Whether a call that failed with ``failure`` is repeated on another connection: the
    connection was lost (not a timeout, not a pool that gave none), and the statement had not
    been sent or is safe to repeat."""
    if isinstance(failure, DatabaseTimeout) or isinstance(failure.__cause__, PoolTimeout):
        return False
    return repeatable or not failure.sent


def watch_dsn(dsn: str | None, pool_conninfo: object) -> str:
    """Where a client's second connection goes (its run watcher's LISTEN, its batches): the
    client's database, or the caller's pool's."""
    if dsn is not None:
        return dsn
    return pool_conninfo if isinstance(pool_conninfo, str) else psycopg_dsn(database_url(None))
