"""A worker's one LISTEN connection, for all three channels, with one reconnect path.

- runs: a trigger announces new claimable runs (payload: the environment): wake the claimer;
- cancel: ``cancel_run`` ended an EXECUTING or WAITING run (payload: the run id): the worker
  holding it cancels its handler, every other worker ignores the id;
- resume: a waiting run's waitpoints all completed (payload: the run id): wake its handler.

After a (re)connect every listener is told that it may have missed something: the claimer
scans, waiting handlers check their runs. A cancel missed while disconnected is caught by the
heartbeat instead (the lease is gone). Without LISTEN (``listen=False``, PgBouncer in
transaction mode) the worker relies on its poll interval and heartbeat alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import psycopg

from fairlane.connection import Outage
from fairlane.engine import engine
from fairlane.engine.statement import run_async
from fairlane.worker.connections import LoopConnection

log = logging.getLogger("fairlane.worker")

# The payload that asks every worker for a full scan: empty, the one name no environment has (a
# trigger refuses it), so that an environment named like any other string, ``*`` included, is
# announced as itself and costs no worker a full scan.
ANY_ENVIRONMENT = ""
RECONNECT_DELAY_S = 1.0


@dataclass(frozen=True, slots=True)
class Listeners:
    """What each channel's notifications are handed to."""

    new_runs: Callable[[str], None]  # an environment, or ANY_ENVIRONMENT after a reconnect
    cancel: Callable[[int], None]  # a run id
    resume: Callable[[int], None]  # a run id
    reconnected: Callable[[], None]  # anything may have been missed while disconnected


async def listen(connection: LoopConnection, schema: str, listeners: Listeners) -> None:
    """Hand every notification to its listener until cancelled, reconnecting after errors."""
    channels = engine(schema).listen
    by_channel: dict[str, Callable[[str], None]] = {
        channels.runs_channel: listeners.new_runs,
        channels.cancel_channel: lambda payload: _with_run_id(payload, listeners.cancel),
        channels.resume_channel: lambda payload: _with_run_id(payload, listeners.resume),
    }
    outage = Outage("notification listener", log)
    while True:
        try:
            async with connection.use() as conn:
                for statement in (channels.runs(), channels.cancels(), channels.resumes()):
                    await run_async(conn, statement)
            outage.recovered()
            listeners.new_runs(ANY_ENVIRONMENT)
            listeners.reconnected()
            # Not a statement, so not bounded: TCP keepalives find a peer that went silent.
            async for notification in conn.notifies():
                by_channel[notification.channel](notification.payload)
        except psycopg.Error as error:
            outage.failed(error)
            await connection.discard()
            await anyio.sleep(RECONNECT_DELAY_S)


def _with_run_id(payload: str, listener: Callable[[int], None]) -> None:
    try:
        run_id = int(payload)
    except ValueError:
        log.warning("ignoring a malformed notice %r", payload)
        return
    listener(run_id)
