"""One index of held runs; the lease's end in no index, so a heartbeat can be a HOT update.

A claim wrote three index entries per run: the primary key, ``runs_executing_idx``
(environment, queue) and ``runs_leased_idx`` (lease_until); and since ``lease_until`` was
indexed, every heartbeat wrote a new row version with those three entries for each run it
extended.

``runs_held_idx`` (environment, queue) over EXECUTING and WAITING runs takes both roles: slot
counts read it by environment and queue, and the lease reclaim walks it for lapsed leases (at
most the runs workers hold, a set bounded by their concurrency, and the entries of runs that
ended since the last vacuum). A claim writes two entries per run; a heartbeat changes no
indexed column.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import schema as migration_schema

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HELD = "status IN ('EXECUTING', 'WAITING')"


def upgrade() -> None:
    schema = migration_schema()
    op.create_index(
        "runs_held_idx",
        "runs",
        ["environment", "queue"],
        schema=schema,
        postgresql_where=sa.text(HELD),
    )
    op.drop_index("runs_executing_idx", table_name="runs", schema=schema)
    op.drop_index("runs_leased_idx", table_name="runs", schema=schema)


def downgrade() -> None:
    schema = migration_schema()
    op.create_index(
        "runs_executing_idx",
        "runs",
        ["environment", "queue"],
        schema=schema,
        postgresql_where=sa.text("status = 'EXECUTING'"),
    )
    op.create_index(
        "runs_leased_idx", "runs", ["lease_until"], schema=schema, postgresql_where=sa.text(HELD)
    )
    op.drop_index("runs_held_idx", table_name="runs", schema=schema)
