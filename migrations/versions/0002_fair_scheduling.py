"""Fair scheduling: environments, queues and the scheduler settings row.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "environments",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("concurrency_limit", sa.Integer),
        sa.Column("burst_factor", sa.Numeric(6, 2), nullable=False, server_default="1.0"),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("served", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("drained", sa.Boolean, nullable=False, server_default=sa.text("true")),
        sa.Column("last_served_at", tz),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint(
            "concurrency_limit IS NULL OR concurrency_limit >= 0", name="environments_limit_check"
        ),
        sa.CheckConstraint("burst_factor >= 1", name="environments_burst_check"),
        schema=schema,
    )
    op.create_table(
        "queues",
        sa.Column("environment", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("concurrency_limit", sa.Integer),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint(
            "concurrency_limit IS NULL OR concurrency_limit >= 0", name="queues_limit_check"
        ),
        schema=schema,
    )
    op.create_table(
        "scheduler",
        sa.Column("id", sa.SmallInteger, primary_key=True, server_default="1"),
        sa.Column("quantum", sa.Integer, nullable=False, server_default="25"),
        sa.Column("max_deficit", sa.Integer, nullable=False, server_default="100"),
        sa.Column("global_concurrency_limit", sa.Integer),
        sa.Column("rate_limit_per_s", sa.Double),
        sa.Column("rate_burst", sa.Double),
        sa.Column("rate_tokens", sa.Double, nullable=False, server_default="0"),
        sa.Column("rate_refilled_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint("id = 1", name="scheduler_single_row"),
        sa.CheckConstraint("quantum >= 1 AND max_deficit >= 0", name="scheduler_drr_check"),
        schema=schema,
    )
    op.drop_index("runs_queued_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_queued_idx",
        "runs",
        ["environment", "queue", sa.text("priority DESC"), "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'QUEUED'"),
    )
    op.create_index(
        "runs_executing_idx",
        "runs",
        ["environment", "queue"],
        schema=schema,
        postgresql_where=sa.text("status = 'EXECUTING'"),
    )
    execute("INSERT INTO {schema}.scheduler (id) VALUES (1) ON CONFLICT DO NOTHING")
    execute(
        """
        INSERT INTO {schema}.environments (name, drained)
        SELECT DISTINCT environment, false FROM {schema}.runs
        ON CONFLICT DO NOTHING
        """
    )
    execute(
        """
        INSERT INTO {schema}.queues (environment, name)
        SELECT DISTINCT environment, queue FROM {schema}.runs
        ON CONFLICT DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    op.drop_index("runs_executing_idx", table_name="runs", schema=schema)
    op.drop_index("runs_queued_idx", table_name="runs", schema=schema)
    op.create_index(
        "runs_queued_idx",
        "runs",
        [sa.text("priority DESC"), "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'QUEUED'"),
    )
    op.drop_table("scheduler", schema=schema)
    op.drop_table("queues", schema=schema)
    op.drop_table("environments", schema=schema)
