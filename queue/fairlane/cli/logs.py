"""Logging for the ``fairlane`` command: ``--log-level`` and ``--log-format text|json``. A
JSON line carries the record's fields and whatever structured fields the caller passed with
``extra=`` (run_id, task, environment, ...)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to ``sys.stderr`` as it is when the record is emitted, not as it was
    when logging was configured: a thread that outlives a redirection (a server's thread in a
    test that captured stderr) then writes to the current stream, not to a closed one."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure(level: str, log_format: str) -> None:
    handler = CurrentStderr()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # psycopg_pool warns at every failed connection attempt; fairlane reports an outage once
    # (when it starts and when it ends), so the pool's own lines show at debug level only.
    logging.getLogger("psycopg.pool").setLevel(
        logging.DEBUG if level.lower() == "debug" else logging.ERROR
    )
    # alembic logs each migration it runs at info level: `fairlane migrate` prints its own
    # summary, and -v (debug) shows alembic's lines too.
    logging.getLogger("alembic").setLevel(
        logging.DEBUG if level.lower() == "debug" else logging.WARNING
    )
