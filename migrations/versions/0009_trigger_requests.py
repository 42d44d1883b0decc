"""Trigger requests as JSON in the database too.

The trigger statements take their requests as one JSON array; ``trigger_requests`` reads it as
rows, the one place that names a request's fields and their types. ``trigger_keyed_runs`` now
takes that JSON instead of one array per field.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from fairlane.migrate import drop_functions, run_frozen_sql, run_named_sql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYED_RUNS_0008 = (
    "trigger_keyed_runs(text[], text[], text[], text[], integer[], integer[], float8[], "
    "timestamptz[], text[], text[], text[], float8[], float8[], bigint[], text[], float8[], "
    "text[], float8[], boolean[], float8[])"
)


def upgrade() -> None:
    drop_functions(KEYED_RUNS_0008)
    run_named_sql("create_trigger_requests", "create_trigger_keyed_runs")


def downgrade() -> None:
    drop_functions("trigger_keyed_runs(jsonb)", "trigger_requests(jsonb)")
    run_frozen_sql("trigger_keyed_0008.sql", "trigger_keyed_runs_0008")
