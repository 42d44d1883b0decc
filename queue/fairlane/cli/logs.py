"""Logging for the ``fairlane`` command: ``--log-level`` and ``--log-format text|json``. A
JSON line carries the record's fields and whatever structured fields the caller passed with
``extra=`` (run_id, task, environment, ...)."""

from __future__ import annotations

import json
import logging
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


def configure(level: str, log_format: str) -> None:
    handler = logging.StreamHandler()
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
