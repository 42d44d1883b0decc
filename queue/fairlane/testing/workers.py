"""Workers for tests: made with quick polling, and drained (``run_until_idle``) sync or async."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import psycopg

from fairlane.config import schema_name
from fairlane.engine import engine
from fairlane.engine.statement import first_async
from fairlane.errors import ConfigurationError
from fairlane.testing.records import run_blocking
from fairlane.worker import TaskRegistry, Worker, WorkerStats

# Quicker than a deployed worker's defaults: a test waits less for polls and periodic jobs.
TEST_WORKER_OPTIONS: dict[str, Any] = {
    "poll_interval": 0.1,
    "periodic_interval": 0.05,
    "metadata_interval": 0.05,
    "shutdown_grace": 5.0,
}
# How long a drain may take before it is given up (TimeoutError): a handler that never ends.
DRAIN_WITHIN_S = 60.0


def choose_registry(given: TaskRegistry | None, default: TaskRegistry | None) -> TaskRegistry:
    """The registry a call gives, else the ini option's."""
    chosen = given if given is not None else default
    if chosen is None:
        raise ConfigurationError(
            "no TaskRegistry: pass one, or set the fairlane_tasks ini option (module:attribute)"
        )
    return chosen


class WorkerFixture:
    """What the ``fairlane_worker`` fixture gives: workers on the test's database.

    ``registry`` is the ``fairlane_tasks`` ini option's, used when a call names none.
    """

    def __init__(
        self, dsn: str, *, schema: str | None = None, registry: TaskRegistry | None = None
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.registry = registry

    def _registry(self, registry: TaskRegistry | None) -> TaskRegistry:
        return choose_registry(registry, self.registry)

    def worker(self, registry: TaskRegistry | None = None, **options: Any) -> Worker:
        """A ``Worker`` of the test's database (``options`` are ``Worker``'s)."""
        settings = {**TEST_WORKER_OPTIONS, "schema": self.schema, **options}
        return Worker(self._registry(registry), self.dsn, **settings)

    def drain(
        self,
        registry: TaskRegistry | None = None,
        *,
        include_delayed: bool = False,
        within: float = DRAIN_WITHIN_S,
        **options: Any,
    ) -> WorkerStats:
        """Run a worker until nothing is due (``Worker.run_until_idle``); returns its counters.
        With ``include_delayed``, DELAYED runs (a delay, a retry's backoff) are made due and
        drained too, until none is left: a test sees a failing run through all its attempts.
        Raises ``TimeoutError`` after ``within`` seconds."""
        return run_blocking(
            partial(
                self.drain_async,
                registry,
                include_delayed=include_delayed,
                within=within,
                **options,
            )
        )

    async def drain_async(
        self,
        registry: TaskRegistry | None = None,
        *,
        include_delayed: bool = False,
        within: float = DRAIN_WITHIN_S,
        **options: Any,
    ) -> WorkerStats:
        """The async twin of ``drain``."""
        total = WorkerStats()
        with anyio.fail_after(within):
            while True:
                worker = self.worker(registry, **options)
                drained = await worker.run_until_idle()
                for name, count in drained.as_dict().items():
                    setattr(total, name, getattr(total, name) + count)
                if not include_delayed or not await self._advance_delayed(worker):
                    return total

    async def _advance_delayed(self, worker: Worker) -> int:
        """Make the DELAYED runs the worker serves due now; how many there were."""
        statement = engine(schema_name(self.schema)).claim.advance_delayed(
            worker.environments, worker.queues
        )
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            return await first_async(conn, statement) or 0
