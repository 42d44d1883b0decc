"""Dashboard sessions kept on the server, so that signing out or revoking the key ends them.

``dashboard_sessions`` holds one row per signed-in browser: the SHA-256 of the random secret
its cookie carries (never the secret), the admin key it was opened with, when it was opened,
last seen and must end at the latest, and the idle time it was opened under. Signing out
deletes the row; revoking the key deletes its rows (and a hard delete of the key cascades).
The ``prune_dashboard_sessions`` periodic job deletes the rows that ended by time.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import execute
from fairlane.schema.revision import schema as migration_schema

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "dashboard_sessions",
        sa.Column("secret_hash", sa.Text, primary_key=True),
        sa.Column(
            "key_id",
            sa.BigInteger,
            sa.ForeignKey(f"{schema}.api_keys.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("last_seen_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("expires_at", tz, nullable=False),
        sa.Column("idle_s", sa.Double, nullable=False),
        sa.CheckConstraint("idle_s > 0", name="dashboard_sessions_idle_check"),
        schema=schema,
    )
    op.create_index("dashboard_sessions_key_idx", "dashboard_sessions", ["key_id"], schema=schema)
    execute(
        """
        INSERT INTO {schema}.periodic_jobs (name, function, interval_s)
        VALUES ('prune_dashboard_sessions', 'prune_dashboard_sessions', 60.0)
        ON CONFLICT (name) DO NOTHING
        """
    )


def downgrade() -> None:
    schema = migration_schema()
    execute("DELETE FROM {schema}.periodic_jobs WHERE name = 'prune_dashboard_sessions'")
    op.drop_index("dashboard_sessions_key_idx", table_name="dashboard_sessions", schema=schema)
    op.drop_table("dashboard_sessions", schema=schema)
