"""Inserting statements announce new runs themselves; the statement trigger goes.

The AFTER INSERT trigger collected every inserted row in a transition table to notify idle
workers; the trigger statement (and the keyed trigger function) now notify in the statement
itself, which costs the trigger's path a fraction of that. Runs inserted by hand are found by
the workers' next scan, one poll interval at most.

Downgrade restores the trigger; trigger_keyed_run keeps its own notification, which PostgreSQL
folds into the trigger's (identical notifications in one transaction are delivered once).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op
from psycopg import sql

from fairlane.migrate import drop_functions, migration_schema, run_frozen_sql, run_named_sql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = sql.Identifier(migration_schema())
    bind = op.get_bind()
    drop_trigger = sql.SQL("DROP TRIGGER IF EXISTS runs_notify_inserted ON {}.runs").format(schema)
    bind.exec_driver_sql(drop_trigger.as_string(None))
    drop_functions("notify_runs_inserted()")
    run_named_sql("create_trigger_keyed_run")


def downgrade() -> None:
    run_frozen_sql("notify_0007.sql", "notify_runs_inserted", "runs_inserted_trigger")
