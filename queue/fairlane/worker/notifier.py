"""Waking idle claimers with LISTEN/NOTIFY.

Triggers announce new claimable runs on the ``<schema>.runs`` channel with the environment as
payload. Where notifications are unavailable (PgBouncer in transaction mode) the worker runs
with ``listen=False`` and relies on its poll interval alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import psycopg

from fairlane.engine.sqlfiles import query
from fairlane.worker.connections import LoopConnection

log = logging.getLogger("fairlane.worker")

ANY_ENVIRONMENT = "*"


async def listen(connection: LoopConnection, schema: str, wake: Callable[[str], None]) -> None:
    """Forward notifications to ``wake`` until cancelled, reconnecting after errors."""
    while True:
        try:
            conn = await connection.get()
            await conn.execute(query("listen_channel", schema))
            # Anything announced while we were not listening must not be missed.
            wake(ANY_ENVIRONMENT)
            async for notification in conn.notifies():
                wake(notification.payload)
        except psycopg.Error:
            log.warning("notification listener lost its connection; reconnecting", exc_info=True)
            await connection.discard()
            await anyio.sleep(1.0)
