"""Bulk retry and cancel by filter: set-based pages newest first, what was left alone and why,
a dry run, and an empty filter refused unless every run is meant."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import Client, RunFilter, TriggerRequest, limits, trigger_many
from fairlane.cli import main
from fairlane.control import BULK_PAGE
from fairlane.errors import ConfigurationError
from tests.helpers import statuses


def failed_runs(client: Client, count: int, **options: Any) -> list[int]:
    return [
        client.create_failed_run("import", code="X", message="m", **options) for _ in range(count)
    ]


def test_retry_many_takes_every_matching_run_and_says_why_it_left_others(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    with Client(dsn) as client:
        failed_runs(client, 5, queue="small")
        failed_runs(client, 3, queue="other")
        limits.set_queue(db, "default", "small", size_limit=2)
        result = client.retry_many(status="SYSTEM_FAILURE", queue="small")
        assert (result.matched, result.changed, result.unchanged) == (5, 2, {"QUEUE_FULL": 3})
        # The other queue's runs were not touched; a second pass finds the retried ones QUEUED.
        assert statuses(db) == {"QUEUED": 2, "SYSTEM_FAILURE": 6}
        again = client.retry_many(queue="small")
        assert again.unchanged == {"QUEUED": 2, "QUEUE_FULL": 3}


def test_pages_past_one_statement_and_cancel_many(dsn: str, db: psycopg.Connection[Any]) -> None:
    count = BULK_PAGE + 50
    trigger_many(db, [TriggerRequest("t", i, environment="bulk") for i in range(count)])
    trigger_many(db, [TriggerRequest("t", environment="kept")])
    db.commit()
    with Client(dsn) as client:
        assert client.count_matching(environment="bulk") == count
        result = client.cancel_many(RunFilter(environment="bulk"))
    assert (result.matched, result.changed) == (count, count)
    assert statuses(db) == {"CANCELED": count, "QUEUED": 1}


def test_an_empty_filter_is_refused_unless_all(dsn: str, db: psycopg.Connection[Any]) -> None:
    with Client(dsn) as client:
        failed_runs(client, 2)
        with pytest.raises(ConfigurationError, match="all=True"):
            client.retry_many()
        assert client.retry_many(all=True).changed == 2


def test_cli_bulk_retry_with_dry_run_and_refusal(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(dsn) as client:
        failed_runs(client, 4, environment="acme")
    base = ["--dsn", dsn]
    assert main(["runs", "retry", *base]) == 2
    assert "--all" in capsys.readouterr().err
    assert (
        main(["runs", "retry", "--environment", "acme", "--since", "1h", "--dry-run", *base]) == 0
    )
    assert capsys.readouterr().out.startswith("4 runs match")
    assert statuses(db) == {"SYSTEM_FAILURE": 4}
    assert (
        main(["runs", "retry", "--environment", "acme", "--status", "system_failure", *base]) == 0
    )
    assert capsys.readouterr().out.startswith("4 of 4 matching runs retried")
    assert main(["runs", "cancel", "--all", *base]) == 0
    assert "4 of 4 matching runs canceled" in capsys.readouterr().out
