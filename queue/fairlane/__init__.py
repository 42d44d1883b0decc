"""fairlane: a fair, fenced job queue and run engine on PostgreSQL alone.

One convention across the API: a plain name is sync, and its async twin carries "async" in
its name (``Client`` / ``AsyncClient``, ``trigger`` / ``trigger_async``,
``limits.set_queue`` / ``limits.set_queue_async``). Everything a user needs is exported here;
the documented submodules are ``fairlane.limits`` (fairlane.scheduling.limits),
``fairlane.maintenance`` and
``fairlane.waitpoints`` (also reachable as attributes of this package). Every error is in
``fairlane.errors`` and exported here.
"""

from fairlane import maintenance, waitpoints
from fairlane.async_client import AsyncClient
from fairlane.batches.api import batch_items, create_batch, get_batch, set_batch_limits
from fairlane.batches.client import AsyncBatchClient
from fairlane.batches.ingest import count_items, ingest_file, ingest_items
from fairlane.client import Client
from fairlane.control import CancelResult, RunFilter
from fairlane.engine.batches import ItemRow
from fairlane.errors import (
    BatchAbortedError,
    BatchError,
    BatchIndexError,
    BatchItemNotTriggered,
    BatchLineError,
    BatchNotFoundError,
    BatchOffsetError,
    BatchRateLimitedError,
    BatchTooLargeError,
    BatchTransactionError,
    BatchWithoutWaitpointError,
    ConfigurationError,
    DatabaseTimeout,
    DatabaseUnavailable,
    DuplicateTaskError,
    FairlaneError,
    InvalidDurationError,
    LeaseLostError,
    MaxDurationExceededError,
    PayloadError,
    QueueSizeLimitExceeded,
    RunNotDelayedError,
    RunNotFoundError,
    RunNotRetryableError,
    RunStateError,
    SchemaMismatchError,
    SchemaObjectError,
    SettingError,
    TriggerOptionError,
    UnknownMaintenanceItemError,
    UnknownTaskError,
    UnsupportedConnectionError,
    WaitpointNotFoundError,
)
from fairlane.models import (
    FINAL_STATUSES,
    Batch,
    ClaimedRun,
    EnvironmentSettings,
    IngestResult,
    PeriodicJob,
    QueueSettings,
    Run,
    RunStatus,
    SchedulerSettings,
    Setting,
)
from fairlane.retry import Backoff
from fairlane.scheduling import limits
from fairlane.triggering.api import trigger, trigger_async, trigger_many, trigger_many_async
from fairlane.triggering.debounce import Debounce
from fairlane.triggering.idempotency import IdempotencyScope
from fairlane.triggering.request import TriggerRequest
from fairlane.waitpoints import (
    WaitResult,
    complete_token,
    complete_token_async,
    create_token,
    create_token_async,
)
from fairlane.worker import RunContext, TaskRegistry, Worker, WorkerStats

__all__ = [
    "FINAL_STATUSES",
    "AsyncBatchClient",
    "AsyncClient",
    "Backoff",
    "Batch",
    "BatchAbortedError",
    "BatchError",
    "BatchIndexError",
    "BatchItemNotTriggered",
    "BatchLineError",
    "BatchNotFoundError",
    "BatchOffsetError",
    "BatchRateLimitedError",
    "BatchTooLargeError",
    "BatchTransactionError",
    "BatchWithoutWaitpointError",
    "CancelResult",
    "ClaimedRun",
    "Client",
    "ConfigurationError",
    "DatabaseTimeout",
    "DatabaseUnavailable",
    "Debounce",
    "DuplicateTaskError",
    "EnvironmentSettings",
    "FairlaneError",
    "IdempotencyScope",
    "IngestResult",
    "InvalidDurationError",
    "ItemRow",
    "LeaseLostError",
    "MaxDurationExceededError",
    "PayloadError",
    "PeriodicJob",
    "QueueSettings",
    "QueueSizeLimitExceeded",
    "Run",
    "RunContext",
    "RunFilter",
    "RunNotDelayedError",
    "RunNotFoundError",
    "RunNotRetryableError",
    "RunStateError",
    "RunStatus",
    "SchedulerSettings",
    "SchemaMismatchError",
    "SchemaObjectError",
    "Setting",
    "SettingError",
    "TaskRegistry",
    "TriggerOptionError",
    "TriggerRequest",
    "UnknownMaintenanceItemError",
    "UnknownTaskError",
    "UnsupportedConnectionError",
    "WaitResult",
    "WaitpointNotFoundError",
    "Worker",
    "WorkerStats",
    "batch_items",
    "complete_token",
    "complete_token_async",
    "count_items",
    "create_batch",
    "create_token",
    "create_token_async",
    "get_batch",
    "ingest_file",
    "ingest_items",
    "limits",
    "maintenance",
    "set_batch_limits",
    "trigger",
    "trigger_async",
    "trigger_many",
    "trigger_many_async",
    "waitpoints",
]
