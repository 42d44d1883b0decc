"""The package's top level is the way in, about 30 names; every name it exported before still
resolves for one release, with a DeprecationWarning naming its module; public row types are in
``fairlane.models`` and their old paths keep working."""

from __future__ import annotations

import re
import warnings
from importlib import import_module
from pathlib import Path

import pytest

import fairlane
from fairlane import models
from fairlane.deprecated_names import MOVED

ROOT = Path(__file__).resolve().parents[2]

# ``fairlane.__all__`` before its surface was narrowed: each must still resolve.
FORMER_ALL = [
    "FINAL_STATUSES",
    "AbortRun",
    "ApiKey",
    "ApiKeyNotFoundError",
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
    "EagerModeError",
    "EnvironmentSettings",
    "FairlaneError",
    "IdempotencyScope",
    "IngestResult",
    "InvalidDurationError",
    "ItemRow",
    "LeaseLostError",
    "MaxDurationExceededError",
    "MetadataRemovalError",
    "PayloadError",
    "PeriodicJob",
    "QueueSettings",
    "QueueSizeLimitExceeded",
    "Run",
    "RunContext",
    "RunFailedError",
    "RunFilter",
    "RunFilterError",
    "RunNotDelayedError",
    "RunNotFoundError",
    "RunNotRetryableError",
    "RunStateError",
    "RunStatus",
    "RunWaitTimeoutError",
    "Schedule",
    "ScheduleNotFoundError",
    "SchedulerSettings",
    "SchemaMismatchError",
    "SchemaObjectError",
    "Setting",
    "SettingError",
    "Task",
    "TaskRegistry",
    "Token",
    "TokenNotFoundError",
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
    "schedules",
    "set_batch_limits",
    "trigger",
    "trigger_async",
    "trigger_many",
    "trigger_many_async",
    "waitpoints",
]


def test_the_top_level_is_small() -> None:
    assert 25 <= len(fairlane.__all__) <= 32
    assert len(set(fairlane.__all__)) == len(fairlane.__all__)
    assert not set(fairlane.__all__) & set(MOVED)


def test_every_exported_name_resolves_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in fairlane.__all__:
            exec(f"from fairlane import {name}", {})


def test_every_former_name_is_exported_or_deprecated() -> None:
    assert set(FORMER_ALL) <= set(fairlane.__all__) | set(MOVED)


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_former_name_warns_and_still_works(name: str) -> None:
    home = MOVED[name]
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match=rf"fairlane\.{name} is deprecated.*{home}"):
        exec(f"from fairlane import {name}", namespace)
    assert namespace[name] is getattr(import_module(home), name)
    with pytest.warns(DeprecationWarning, match=name):
        assert getattr(fairlane, name) is namespace[name]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        fairlane.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        exec("from fairlane import no_such_name", {})
    # Submodules still import through the package.
    exec("from fairlane import tracing", {})


def test_public_row_types_live_in_models_and_their_old_paths_work() -> None:
    from fairlane import control
    from fairlane.engine import batches, waits

    assert batches.ItemRow is models.ItemRow
    assert waits.WaitsOn is models.WaitsOn
    assert control.CancelResult is models.CancelResult
    assert control.BulkResult is models.BulkResult


def test_the_readme_lists_every_deprecated_name() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Deprecated names", 1)[1].split("\n#", 1)[0]
    modules = {home.removeprefix("fairlane.") for home in MOVED.values()}
    listed = set(re.findall(r"`fairlane\.(\w+)`", section)) - modules
    assert listed == set(MOVED)
