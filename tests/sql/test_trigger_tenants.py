"""A trigger reads the settings rows of the queues it adds to, never the whole environments and
queues tables: a multi-tenant database holds thousands of each, and a trigger's cost must not
grow with them.

The plain trigger's statement checks whether the queues it adds to have a size limit. Joined to
the two tables, it was planned (the planner expects a hundred requests from the JSON) as a hash
of the whole environments table, read on every trigger: with 20,000 environments a one-run
trigger took 1.2 ms of the server's time instead of 0.3.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits
from fairlane.engine.statement import rows
from fairlane.errors import QueueSizeLimitExceeded
from fairlane.triggering.api import trigger_many, trigger_statement

TENANTS = 5000

# Every tenant with its environment row and three queues, as a platform that has been running
# for a while has them, with the planner's statistics up to date.
MANY_TENANTS = f"""
INSERT INTO fairlane.environments (name)
SELECT 'tenant' || n FROM generate_series(1, {TENANTS}) AS n;
INSERT INTO fairlane.queues (environment, name)
SELECT 'tenant' || n, queue FROM generate_series(1, {TENANTS}) AS n,
       unnest(ARRAY['default', 'mail', 'reports']) AS queue;
ANALYZE fairlane.environments;
ANALYZE fairlane.queues;
"""

TABLES_SCANNED = """
SELECT relname, seq_scan, idx_scan FROM pg_stat_xact_user_tables
WHERE schemaname = 'fairlane' AND relname IN ('environments', 'queues')
ORDER BY relname
"""


def scans_of_one_trigger(dsn: str, request: TriggerRequest) -> dict[str, tuple[int, int]]:
    """The sequential and index scans of each settings table by one plain trigger, made on a
    new session (so planned with the tables as they are now), in its own transaction."""
    with psycopg.connect(dsn) as conn:
        (made,) = rows(conn, trigger_statement([request], schema="fairlane"))
        assert made.ids is not None
        scans = {name: (seq, idx) for name, seq, idx in conn.execute(TABLES_SCANNED).fetchall()}
        conn.commit()
    return scans


@pytest.mark.parametrize(
    "request_",
    [
        TriggerRequest("report", environment="tenant42", queue="reports"),
        TriggerRequest("welcome"),  # the default environment and queue, not made yet
    ],
    ids=["a tenant's queue", "a new queue"],
)
def test_a_trigger_among_thousands_of_tenants_scans_neither_settings_table(
    dsn: str, db: psycopg.Connection[Any], request_: TriggerRequest
) -> None:
    db.execute(MANY_TENANTS)
    scans = scans_of_one_trigger(dsn, request_)
    assert scans["environments"][0] == 0, scans
    assert scans["queues"][0] == 0, scans
    assert scans["environments"][1] > 0, scans  # looked up by key
    assert scans["queues"][1] > 0, scans


def test_limits_among_thousands_of_tenants_still_refuse_a_full_queue(
    db: psycopg.Connection[Any],
) -> None:
    db.execute(MANY_TENANTS)
    limits.set_queue(db, "tenant7", "mail", size_limit=2)
    limits.set_environment(db, "tenant8", size_limit=1)
    mail = [TriggerRequest("send", environment="tenant7", queue="mail") for _ in range(2)]
    assert len(trigger_many(db, mail)) == 2
    with pytest.raises(QueueSizeLimitExceeded) as refused:
        trigger_many(db, mail[:1])
    assert (refused.value.environment, refused.value.queue) == ("tenant7", "mail")
    assert len(trigger_many(db, [TriggerRequest("send", environment="tenant8")])) == 1
    with pytest.raises(QueueSizeLimitExceeded) as refused_environment:
        trigger_many(db, [TriggerRequest("send", environment="tenant8", queue="reports")])
    assert refused_environment.value.environment == "tenant8"
    # Every other tenant is unlimited.
    others = [TriggerRequest("send", environment="tenant9", queue="mail") for _ in range(5)]
    assert len(trigger_many(db, others)) == 5
