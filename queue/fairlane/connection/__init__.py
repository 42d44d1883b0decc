"""Connections that fail in bounded time: connection options (timeouts, keepalives, session
settings as connection parameters), deadlines that abandon a connection whose server does not
answer, and the mapping of psycopg's outage errors to ``DatabaseUnavailable``."""

from fairlane.connection.deadline import Deadline, abort, bounded, bounded_async
from fairlane.connection.failures import (
    Outage,
    connect_failure,
    is_connection_lost,
    pool_timeout,
    unavailable,
)
from fairlane.connection.options import (
    ABORT_GRACE_S,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_PREPARE_THRESHOLD,
    DEFAULT_STATEMENT_TIMEOUT,
    ConnectionOptions,
    check_dsn,
    check_prepare_threshold,
    connect_timeout_for,
    hide_password,
    parse_dsn,
)

__all__ = [
    "ABORT_GRACE_S",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_PREPARE_THRESHOLD",
    "DEFAULT_STATEMENT_TIMEOUT",
    "ConnectionOptions",
    "Deadline",
    "Outage",
    "abort",
    "bounded",
    "bounded_async",
    "check_dsn",
    "check_prepare_threshold",
    "connect_failure",
    "connect_timeout_for",
    "hide_password",
    "is_connection_lost",
    "parse_dsn",
    "pool_timeout",
    "unavailable",
]
