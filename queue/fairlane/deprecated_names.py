"""Names ``fairlane`` exported at its top level before its surface was narrowed, and the module
each lives in now. They still resolve, with a ``DeprecationWarning``, for one release (README,
"Deprecated names"); import them from their module instead."""

from __future__ import annotations

import importlib
import warnings

_ERRORS = (
    "ApiKeyNotFoundError",
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
    "ConfigurationError",
    "DatabaseTimeout",
    "DuplicateTaskError",
    "EagerModeError",
    "InvalidDurationError",
    "LeaseLostError",
    "MaxDurationExceededError",
    "MetadataRemovalError",
    "PayloadError",
    "QueueSizeLimitExceeded",
    "RunFailedError",
    "RunFilterError",
    "RunNotDelayedError",
    "RunNotFoundError",
    "RunNotRetryableError",
    "RunStateError",
    "RunWaitTimeoutError",
    "ScheduleNotFoundError",
    "SchemaMismatchError",
    "SchemaObjectError",
    "SettingError",
    "TokenNotFoundError",
    "TriggerOptionError",
    "UnknownMaintenanceItemError",
    "UnknownTaskError",
    "UnsupportedConnectionError",
    "WaitpointNotFoundError",
)
_MODELS = (
    "FINAL_STATUSES",
    "ApiKey",
    "Batch",
    "CancelResult",
    "ClaimedRun",
    "EnvironmentSettings",
    "IngestResult",
    "ItemRow",
    "PeriodicJob",
    "QueueSettings",
    "Schedule",
    "SchedulerSettings",
    "Setting",
    "Token",
)
_BATCHES = (
    "AsyncBatchClient",
    "batch_items",
    "count_items",
    "create_batch",
    "get_batch",
    "ingest_file",
    "ingest_items",
    "set_batch_limits",
)
_TOKENS = ("complete_token", "complete_token_async", "create_token", "create_token_async")

# Each deprecated name and the module that exports it now.
MOVED: dict[str, str] = {
    **dict.fromkeys(_ERRORS, "fairlane.errors"),
    **dict.fromkeys(_MODELS, "fairlane.models"),
    **dict.fromkeys(_BATCHES, "fairlane.batches"),
    **dict.fromkeys(_TOKENS, "fairlane.waitpoints"),
    "WorkerStats": "fairlane.worker",
}


def resolve(name: str) -> object:
    """The object a deprecated top-level name stands for, warning the importer where to take it
    from; AttributeError for a name that never was one."""
    home = MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'fairlane' has no attribute {name!r}")
    warnings.warn(
        f"fairlane.{name} is deprecated and will be removed in the next release: "
        f"import it from {home} (from {home} import {name})",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(home), name)
