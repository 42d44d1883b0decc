"""fairlane: a fair, fenced job queue and run engine on PostgreSQL alone."""

from fairlane import maintenance, waitpoints
from fairlane.client import Client
from fairlane.control import CancelResult, RunFilter
from fairlane.errors import (
    ConfigurationError,
    FairlaneError,
    InvalidDurationError,
    LeaseLostError,
    PayloadError,
    QueueSizeLimitExceeded,
    RunNotDelayedError,
    RunNotFoundError,
    RunNotRetryableError,
    RunStateError,
    TriggerOptionError,
    UnknownTaskError,
    WaitpointNotFoundError,
)
from fairlane.models import FINAL_STATUSES, ClaimedRun, Run, RunStatus
from fairlane.retry import Backoff
from fairlane.scheduling import limits
from fairlane.triggering.api import trigger, trigger_async, trigger_many, trigger_many_async
from fairlane.triggering.debounce import Debounce
from fairlane.triggering.idempotency import IdempotencyScope
from fairlane.triggering.request import TriggerRequest
from fairlane.worker import RunContext, TaskRegistry, Worker, WorkerStats

__all__ = [
    "FINAL_STATUSES",
    "Backoff",
    "CancelResult",
    "ClaimedRun",
    "Client",
    "ConfigurationError",
    "Debounce",
    "FairlaneError",
    "IdempotencyScope",
    "InvalidDurationError",
    "LeaseLostError",
    "PayloadError",
    "QueueSizeLimitExceeded",
    "Run",
    "RunContext",
    "RunFilter",
    "RunNotDelayedError",
    "RunNotFoundError",
    "RunNotRetryableError",
    "RunStateError",
    "RunStatus",
    "TaskRegistry",
    "TriggerOptionError",
    "TriggerRequest",
    "UnknownTaskError",
    "WaitpointNotFoundError",
    "Worker",
    "WorkerStats",
    "trigger",
    "trigger_async",
    "trigger_many",
    "trigger_many_async",
]
