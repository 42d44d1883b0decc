"""How fairlane opens connections: timeouts, TCP keepalives and session settings, all given as
connection parameters, so nothing is ever SET at session level (a session setting would leak
to other clients through a transaction-pooling PgBouncer).

- ``connect_timeout``: seconds to open a connection (libpq counts whole seconds, at least 2).
- ``statement_timeout`` and ``lock_timeout``: sent as ``options=-c statement_timeout=...``;
  the server cancels a statement that runs or waits for a lock longer. A server that does not
  answer at all (a hung host, a network partition, a stopped backend) cannot cancel anything,
  so fairlane also gives up on the connection itself ``ABORT_GRACE_S`` after the statement
  timeout (fairlane.connection.deadline).
- TCP keepalives (``KEEPALIVES``) and ``tcp_user_timeout``: a peer that stopped answering is
  found within about 30 s even on a connection that only waits (a LISTEN connection).
- ``prepare_threshold``: psycopg prepares a statement on a connection once it has run this
  many times there; None never prepares. A prepared statement lives in one server session, so
  behind a transaction-pooling PgBouncer that does not track them (before 1.21, or without
  ``max_prepared_statements``) it must be None.

A DSN's own keepalive, ``tcp_user_timeout`` and ``application_name`` parameters win over these
defaults, and so does its ``connect_timeout`` unless one is passed (``connect_timeout_for``:
clients and workers take it as their own, so that they also give up on a pool at that time);
its ``options`` are kept, after fairlane's, so that its ``-c`` settings win on the server.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from fairlane.errors import ConfigurationError

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_STATEMENT_TIMEOUT = 30.0
DEFAULT_LOCK_TIMEOUT = 10.0
# psycopg's own default.
DEFAULT_PREPARE_THRESHOLD = 5
# How long past its statement timeout a statement may go unanswered before its connection is
# abandoned: the server cancels it at the timeout when it can, and that is the better end
# (the connection stays usable).
ABORT_GRACE_S = 1.0
# A silent peer is detected after idle + interval * count seconds.
KEEPALIVES: Mapping[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 15,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
# Data sent but not acknowledged for this long (a partition while sending) fails the connection.
TCP_USER_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """The parameters of every connection fairlane opens. Timeouts are in seconds; a
    ``statement_timeout`` or ``lock_timeout`` of None (or 0) leaves the server's own."""

    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT
    lock_timeout: float | None = None
    application_name: str = "fairlane"
    # Further server settings, sent as ``-c name=value`` (synchronous_commit for fast claims).
    settings: Mapping[str, str] = field(default_factory=dict)
    # Executions of a statement on a connection before psycopg prepares it; None: never.
    prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD

    def __post_init__(self) -> None:
        _positive("connect_timeout", self.connect_timeout)
        for name in ("statement_timeout", "lock_timeout"):
            value = getattr(self, name)
            if value is not None and value != 0:
                _positive(name, value)
        check_prepare_threshold(self.prepare_threshold)

    def with_(self, **changes: Any) -> ConnectionOptions:
        """A copy with some fields changed."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        return ConnectionOptions(**values)

    @property
    def answer_within(self) -> float | None:
        """How long a statement may go unanswered before its connection is abandoned."""
        if not self.statement_timeout:
            return None
        return self.statement_timeout + ABORT_GRACE_S

    def server_settings(self) -> dict[str, str]:
        settings: dict[str, str] = {}
        if self.statement_timeout:
            settings["statement_timeout"] = str(_milliseconds(self.statement_timeout))
        if self.lock_timeout:
            settings["lock_timeout"] = str(_milliseconds(self.lock_timeout))
        settings.update(self.settings)
        return settings

    def kwargs(self, dsn: str, *, autocommit: bool = True) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect(dsn, **kwargs)`` or a pool's ``kwargs``."""
        given = parse_dsn(dsn)
        kwargs: dict[str, Any] = {
            "autocommit": autocommit,
            "connect_timeout": libpq_connect_timeout(self.connect_timeout),
            "prepare_threshold": self.prepare_threshold,
        }
        defaults: dict[str, Any] = {
            **KEEPALIVES,
            "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
            "application_name": self.application_name,
        }
        kwargs.update({key: value for key, value in defaults.items() if key not in given})
        options = " ".join(
            f"-c {name}={_option_value(value)}" for name, value in self.server_settings().items()
        )
        if given.get("options"):
            options = f"{options} {given['options']}".strip()
        if options:
            kwargs["options"] = options
        return kwargs


def check_prepare_threshold(value: object) -> int | None:
    """``value`` once it is a valid ``prepare_threshold``: None, or a whole number >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"prepare_threshold must be None (never prepare) or an integer >= 0, not {value!r}"
        )
    return value


def connect_timeout_for(dsn: str | None, given: float | None) -> float:
    """The connect timeout of a client or worker: the one ``given``, else the DSN's own
    ``connect_timeout``, else ``DEFAULT_CONNECT_TIMEOUT``."""
    if given is not None:
        return given
    value = parse_dsn(dsn).get("connect_timeout") if dsn else None
    if value is None or str(value).strip() == "":
        return DEFAULT_CONNECT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        # libpq's 0 (or less) waits for ever, which fairlane never does.
        raise ConfigurationError(
            f"malformed database URL: connect_timeout {value!r} is not a positive number of seconds"
        )
    return seconds


def libpq_connect_timeout(seconds: float) -> int:
    """libpq's ``connect_timeout``: whole seconds, at least 2 (libpq's own minimum)."""
    return max(2, math.ceil(seconds))


def parse_dsn(dsn: str) -> dict[str, Any]:
    """The DSN's parameters; ``ConfigurationError`` (one line, password hidden) when it is
    malformed: not a URL or key=value string, an unknown parameter, a bad port."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        reason = (redact(str(error).strip(), dsn).splitlines() or ["cannot be parsed"])[0]
        raise ConfigurationError(f"malformed database URL: {reason}") from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ConfigurationError(f"malformed database URL: port {port!r} is not a port number")
    return params


def check_dsn(dsn: str) -> str:
    """``dsn`` itself once ``parse_dsn`` accepts it."""
    parse_dsn(dsn)
    return dsn


_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def redact(text: str, dsn: str | None = None) -> str:
    """``text`` with any password in it (or in ``dsn``, where ``text`` quotes it) hidden."""
    if dsn:
        text = text.replace(dsn, hide_password(dsn))
    return hide_password(text)


def hide_password(dsn: str) -> str:
    return _KV_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", dsn))


def _milliseconds(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _option_value(value: str) -> str:
    # In libpq's options, a space separates arguments and a backslash escapes.
    return str(value).replace("\\", "\\\\").replace(" ", "\\ ")


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, not {value!r}")
    if math.isinf(value):
        raise ConfigurationError(f"{name} must be finite")
