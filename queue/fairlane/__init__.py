"""fairlane: a fair, fenced job queue and run engine on PostgreSQL alone."""

from fairlane.client import Client
from fairlane.enqueue import trigger, trigger_async, trigger_many, trigger_many_async
from fairlane.errors import (
    ConfigurationError,
    FairlaneError,
    LeaseLostError,
    PayloadError,
    RunNotFoundError,
    TriggerOptionError,
    UnknownTaskError,
)
from fairlane.models import FINAL_STATUSES, ClaimedRun, Run, RunStatus
from fairlane.retry import Backoff
from fairlane.trigger import TriggerRequest
from fairlane.worker import RunContext, TaskRegistry, Worker, WorkerStats

__all__ = [
    "FINAL_STATUSES",
    "Backoff",
    "ClaimedRun",
    "Client",
    "ConfigurationError",
    "FairlaneError",
    "LeaseLostError",
    "PayloadError",
    "Run",
    "RunContext",
    "RunNotFoundError",
    "RunStatus",
    "TaskRegistry",
    "TriggerOptionError",
    "TriggerRequest",
    "UnknownTaskError",
    "Worker",
    "WorkerStats",
    "trigger",
    "trigger_async",
    "trigger_many",
    "trigger_many_async",
]
