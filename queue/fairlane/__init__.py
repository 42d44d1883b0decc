"""fairlane: a fair, fenced job queue and run engine on PostgreSQL alone.

The ways in: ``Client`` and ``AsyncClient`` for acting on runs from outside a worker;
``Worker``, ``TaskRegistry`` and ``RunContext`` for running them; ``trigger`` and
``trigger_many`` (and their async twins) for triggering inside your own transaction. One
convention across the API: a plain name is sync, and its async twin carries "async" in its
name (``Client`` / ``AsyncClient``, ``trigger`` / ``trigger_async``, ``limits.set_queue`` /
``limits.set_queue_async``).

The namespaces are modules: ``fairlane.limits``, ``fairlane.schedules``,
``fairlane.maintenance``, ``fairlane.waitpoints`` (tokens) and ``fairlane.batches``. Every
error is in ``fairlane.errors`` (``FairlaneError``, ``AbortRun`` and ``DatabaseUnavailable``
also here), every public value type in ``fairlane.models`` (``Run`` and ``RunStatus`` also
here). Names this package exported before are still reachable for one release, with a
``DeprecationWarning`` (``fairlane.deprecated_names``).
"""

from fairlane import batches, errors, limits, maintenance, models, schedules, waitpoints
from fairlane.async_client import AsyncClient
from fairlane.client import Client
from fairlane.control import RunFilter
from fairlane.deprecated_names import resolve
from fairlane.errors import AbortRun, DatabaseUnavailable, FairlaneError
from fairlane.models import Run, RunStatus
from fairlane.retry import Backoff
from fairlane.triggering.api import trigger, trigger_async, trigger_many, trigger_many_async
from fairlane.triggering.debounce import Debounce
from fairlane.triggering.idempotency import IdempotencyScope
from fairlane.triggering.request import TriggerRequest
from fairlane.waitpoints import WaitResult
from fairlane.worker import RunContext, Task, TaskRegistry, Worker

__all__ = [
    "AbortRun",
    "AsyncClient",
    "Backoff",
    "Client",
    "DatabaseUnavailable",
    "Debounce",
    "FairlaneError",
    "IdempotencyScope",
    "Run",
    "RunContext",
    "RunFilter",
    "RunStatus",
    "Task",
    "TaskRegistry",
    "TriggerRequest",
    "WaitResult",
    "Worker",
    "batches",
    "errors",
    "limits",
    "maintenance",
    "models",
    "schedules",
    "trigger",
    "trigger_async",
    "trigger_many",
    "trigger_many_async",
    "waitpoints",
]


def __getattr__(name: str) -> object:
    return resolve(name)
