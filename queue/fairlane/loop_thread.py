"""An event loop on a thread of its own: how a sync object runs async code that is written once
and has no generated twin (``BatchClient`` runs ``AsyncBatchClient``, ``RunWatcher`` runs
``AsyncRunWatcher``).

The thread is a daemon, so an object left unclosed does not hold the interpreter's exit up
(anyio's own portal thread would); ``stop`` ends the loop and joins the thread.
"""

from __future__ import annotations

import queue
import threading

import anyio
from anyio.from_thread import BlockingPortal


class LoopThread:
    """A thread running an event loop, started at once, and ``portal``, which hands it calls
    (``portal.call(func, *args)``: the result of ``func`` run on the loop, or its exception)."""

    def __init__(self, name: str) -> None:
        started: queue.SimpleQueue[BlockingPortal | BaseException] = queue.SimpleQueue()

        async def serve() -> None:
            async with BlockingPortal() as portal:
                started.put(portal)
                await portal.sleep_until_stopped()

        def run() -> None:
            try:
                anyio.run(serve)
            except BaseException as error:
                started.put(error)
                raise

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()
        portal = started.get()
        if isinstance(portal, BaseException):
            raise portal
        self.portal = portal

    def stop(self) -> None:
        """End the loop (after the calls in flight) and join its thread."""
        try:
            self.portal.call(self.portal.stop)
        finally:
            self.thread.join()
