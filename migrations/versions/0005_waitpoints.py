"""Waitpoints: runs waiting on runs, times and tokens, without holding a slot.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from typing import LiteralString

import sqlalchemy as sa
from alembic import op
from psycopg import sql
from sqlalchemy.dialects import postgresql

from fairlane.migrate import drop_functions, migration_schema, run_frozen_sql, run_named_sql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTIONS: tuple[LiteralString, ...] = (
    "complete_due_waitpoints()",
    "resume_run(bigint, uuid)",
    "begin_waiting(bigint, uuid)",
    "complete_run_waitpoint()",
    "wake_waiting_runs(bigint[])",
    "slot_holders(text)",
)


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.add_column(
        "runs",
        sa.Column("has_waiters", sa.Boolean, nullable=False, server_default=sa.text("false")),
        schema=schema,
    )
    op.add_column(
        "runs",
        sa.Column("resume_ready", sa.Boolean, nullable=False, server_default=sa.text("false")),
        schema=schema,
    )
    op.drop_index("runs_leased_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_leased_idx",
        "runs",
        ["lease_until"],
        schema=schema,
        postgresql_where=sa.text("status IN ('EXECUTING', 'WAITING')"),
    )
    op.create_index(
        "runs_resumable_idx",
        "runs",
        ["environment", "queue"],
        schema=schema,
        postgresql_where=sa.text("status = 'WAITING' AND resume_ready"),
    )
    op.create_table(
        "waitpoints",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default="PENDING"),
        sa.Column("run_id", sa.BigInteger),
        sa.Column("complete_after", tz),
        sa.Column("timeout_at", tz),
        sa.Column("idempotency_key", sa.Text),
        sa.Column("inactive_idempotency_key", sa.Text),
        sa.Column("idempotency_expires_at", tz),
        sa.Column("is_error", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("output", postgresql.JSONB),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("completed_at", tz),
        sa.CheckConstraint(
            "kind IN ('RUN', 'DATETIME', 'MANUAL', 'BATCH')", name="waitpoints_kind_check"
        ),
        sa.CheckConstraint("status IN ('PENDING', 'COMPLETED')", name="waitpoints_status_check"),
        schema=schema,
    )
    op.create_index(
        "waitpoints_run_idx",
        "waitpoints",
        ["run_id"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("kind = 'RUN'"),
    )
    op.create_index(
        "waitpoints_token_key_idx",
        "waitpoints",
        ["idempotency_key"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("kind = 'MANUAL' AND idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "waitpoints_due_idx",
        "waitpoints",
        [sa.text("coalesce(complete_after, timeout_at)")],
        schema=schema,
        postgresql_where=sa.text("status = 'PENDING' AND kind IN ('DATETIME', 'MANUAL')"),
    )
    op.create_table(
        "run_waitpoints",
        sa.Column("run_id", sa.BigInteger, primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("item", sa.Integer, primary_key=True),
        sa.Column("waitpoint_id", sa.BigInteger, nullable=False),
        schema=schema,
    )
    op.create_index(
        "run_waitpoints_waitpoint_idx", "run_waitpoints", ["waitpoint_id"], schema=schema
    )
    run_named_sql(
        "create_wake_waiting_runs",
        "create_complete_run_waitpoint",
        "create_runs_finished_trigger",
        "create_begin_waiting",
        "create_resume_run",
        "create_complete_due_waitpoints",
        "seed_waitpoints_periodic_job",
        # Functions whose bodies learn about WAITING runs.
        "create_slot_holders",
        # Cancel tells the worker of a WAITING run too, so its suspended handler stops.
        "create_cancel_run",
        "create_reclaim_expired_leases",
        "create_claim_from_environment",
    )


def downgrade() -> None:
    schema = migration_schema()
    bind = op.get_bind()
    drop_trigger = sql.SQL("DROP TRIGGER IF EXISTS runs_complete_waitpoints ON {}.runs").format(
        sql.Identifier(schema)
    )
    bind.exec_driver_sql(drop_trigger.as_string(None))
    remove_job = sql.SQL(
        "DELETE FROM {}.periodic_jobs WHERE name = 'complete_due_waitpoints'"
    ).format(sql.Identifier(schema))
    bind.exec_driver_sql(remove_job.as_string(None))
    drop_functions(*FUNCTIONS)
    op.drop_table("run_waitpoints", schema=schema)
    op.drop_table("waitpoints", schema=schema)
    op.drop_index("runs_resumable_idx", table_name="runs", schema=schema)
    op.drop_index("runs_leased_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_leased_idx",
        "runs",
        ["lease_until"],
        schema=schema,
        postgresql_where=sa.text("status = 'EXECUTING'"),
    )
    op.drop_column("runs", "resume_ready", schema=schema)
    op.drop_column("runs", "has_waiters", schema=schema)
    run_frozen_sql(
        "0005_downgrade.sql",
        "restore_claim_from_environment_0004",
        "restore_reclaim_expired_leases_0004",
    )
