"""Hearing that a run this worker executes was cancelled.

``cancel_run`` (``sql/cancel.sql``) ends an EXECUTING run CANCELED and clears its lease token
in one statement, then announces the run id on the ``<schema>.cancel`` channel. The worker
holding the run cancels its handler at once; every other worker ignores the id. Without LISTEN
(``listen=False``, PgBouncer in transaction mode) nothing arrives here and the heartbeat finds
the lease gone within one beat instead, so the handler still stops, only later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import psycopg

from fairlane.engine.sqlfiles import query
from fairlane.worker.connections import LoopConnection

log = logging.getLogger("fairlane.worker")


async def listen(connection: LoopConnection, schema: str, cancel: Callable[[int], None]) -> None:
    """Call ``cancel(run_id)`` for every announced cancel until cancelled; reconnects after
    errors. A cancel announced while disconnected is caught by the heartbeat instead."""
    while True:
        try:
            conn = await connection.get()
            await conn.execute(query("listen_cancel_channel", schema))
            async for notification in conn.notifies():
                try:
                    run_id = int(notification.payload)
                except ValueError:
                    log.warning("ignoring a malformed cancel notice %r", notification.payload)
                    continue
                cancel(run_id)
        except psycopg.Error:
            log.warning("cancel listener lost its connection; reconnecting", exc_info=True)
            await connection.discard()
            await anyio.sleep(1.0)
