"""What a claim hands a worker: each run's payload and metadata as they were triggered. The
claim sends a JSON null payload and empty metadata as SQL NULL (sql/claim/claim.sql), so
the reading side must give them back as None and as a dict of the run's own."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, trigger_many
from fairlane.worker.lease_store import LeaseStore

pytestmark = pytest.mark.anyio


async def test_payload_and_metadata_come_back_as_triggered(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    given: list[tuple[Any, dict[str, Any] | None]] = [
        (None, None),
        ({}, {}),
        ([], {"k": "v"}),
        ("null", {"nested": {"a": [1, None]}}),
        (0, None),
        (None, None),
    ]
    requests = [TriggerRequest("t", payload, metadata=metadata) for payload, metadata in given]
    ids = trigger_many(db, requests)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        runs = {run.id: run for run in await store.claim(conn, len(given))}
    claimed = [runs[run_id] for run_id in ids]
    assert [(run.payload, run.metadata) for run in claimed] == [
        (payload, metadata or {}) for payload, metadata in given
    ]
    # Empty metadata is a dict of each run's own, not one shared between runs.
    claimed[0].metadata["mine"] = True
    assert claimed[-1].metadata == {}
