"""Active environments: the claim serves the environments known to have work.

A scan of the queued index marks environments that gained work (``discover_environments``);
``claim_candidates`` reads only those rows, through a partial index, instead of scanning for
work across every environment on each claim. ``claim_runs`` takes ``full_scan``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from psycopg import sql

from fairlane.migrate import migration_schema, run_frozen_sql, run_named_sql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLAIM_RUNS_0006 = "claim_runs(integer, double precision, text, text[], text[])"
CLAIM_RUNS_0007 = "claim_runs(integer, double precision, text, text[], text[], boolean)"


def _drop_function(signature: str) -> None:
    drop = sql.SQL("DROP FUNCTION IF EXISTS {}.{}").format(
        sql.Identifier(migration_schema()), sql.SQL(signature)
    )
    op.get_bind().exec_driver_sql(drop.as_string(None))


def upgrade() -> None:
    op.create_index(
        "environments_active_idx",
        "environments",
        ["name"],
        schema=migration_schema(),
        postgresql_where=sa.text("NOT drained"),
    )
    _drop_function(CLAIM_RUNS_0006)
    run_named_sql("create_discover_environments", "create_claim_candidates", "create_claim_runs")


def downgrade() -> None:
    _drop_function(CLAIM_RUNS_0007)
    _drop_function("discover_environments(text[])")
    op.drop_index("environments_active_idx", table_name="environments", schema=migration_schema())
    run_frozen_sql("0007_downgrade.sql", "restore_claim_candidates_0006", "restore_claim_runs_0006")
