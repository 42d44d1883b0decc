"""Trigger options: idempotency keys, debounce, queue size limits, parent runs, cancel.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from collections.abc import Sequence
from typing import LiteralString

import sqlalchemy as sa
from alembic import op
from psycopg import sql

from fairlane.migrate import drop_functions, migration_schema, run_frozen_sql, run_named_sql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTIONS: tuple[LiteralString, ...] = (
    "trigger_keyed_runs(text[], text[], text[], text[], integer[], integer[], float8[], "
    "timestamptz[], text[], text[], text[], float8[], float8[], bigint[], text[], float8[], "
    "text[], float8[], boolean[], float8[])",
    "trigger_keyed_run(text, text, text, jsonb, integer, integer, float8, timestamptz, text[], "
    "jsonb, text, float8, float8, bigint, text, float8, text, float8, boolean, float8)",
    "find_idempotent_run(text, text, text)",
    "lock_debounce_key(text, text, text)",
    "join_debounced_run(bigint, float8, float8, boolean, jsonb, jsonb, text[], integer, "
    "float8, text)",
    "prune_debounce_keys()",
    "check_queue_sizes(text[], text[], integer[])",
    "cancel_run(bigint)",
    "reschedule_run(bigint, timestamptz)",
    "retry_run(bigint)",
)


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    for column in (
        sa.Column("parent_run_id", sa.BigInteger),
        sa.Column("idempotency_key", sa.Text),
        sa.Column("idempotency_key_expires_at", tz),
        sa.Column("inactive_idempotency_key", sa.Text),
    ):
        op.add_column("runs", column, schema=schema)
    op.create_index(
        "runs_delayed_queue_idx",
        "runs",
        ["environment", "queue"],
        schema=schema,
        postgresql_where=sa.text("status = 'DELAYED'"),
    )
    op.create_index(
        "runs_idempotency_key_idx",
        "runs",
        ["environment", "task", "idempotency_key"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "runs_parent_idx",
        "runs",
        ["parent_run_id"],
        schema=schema,
        postgresql_where=sa.text("parent_run_id IS NOT NULL"),
    )
    for table in ("environments", "queues"):
        op.add_column(table, sa.Column("size_limit", sa.Integer), schema=schema)
        op.create_check_constraint(
            f"{table}_size_check", table, "size_limit IS NULL OR size_limit >= 0", schema=schema
        )
    op.create_table(
        "debounce_keys",
        sa.Column("environment", sa.Text, primary_key=True),
        sa.Column("task", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("run_id", sa.BigInteger),
        schema=schema,
    )
    run_named_sql(
        "seed_trigger_option_settings",
        "create_check_queue_sizes",
        "create_find_idempotent_run",
        "create_lock_debounce_key",
        "create_join_debounced_run",
        "create_prune_debounce_keys",
        "create_trigger_keyed_run",
        "create_cancel_run",
        "create_reschedule_run",
        "create_retry_run",
        "seed_debounce_periodic_job",
    )
    # Its form until 0009 made it take the requests as JSON (sql/trigger_keyed.sql has that).
    run_frozen_sql("trigger_keyed_0008.sql", "trigger_keyed_runs_0008")


def downgrade() -> None:
    schema = migration_schema()
    bind = op.get_bind()
    remove_job = sql.SQL("DELETE FROM {}.periodic_jobs WHERE name = 'prune_debounce_keys'").format(
        sql.Identifier(schema)
    )
    bind.exec_driver_sql(remove_job.as_string(None))
    run_named_sql("remove_trigger_option_settings")
    drop_functions(*FUNCTIONS)
    op.drop_table("debounce_keys", schema=schema)
    for table in ("queues", "environments"):
        op.drop_constraint(f"{table}_size_check", table, schema=schema)
        op.drop_column(table, "size_limit", schema=schema)
    for index in ("runs_parent_idx", "runs_idempotency_key_idx", "runs_delayed_queue_idx"):
        op.drop_index(index, table_name="runs", schema=schema)
    for column in (
        "inactive_idempotency_key",
        "idempotency_key_expires_at",
        "idempotency_key",
        "parent_run_id",
    ):
        op.drop_column("runs", column, schema=schema)
