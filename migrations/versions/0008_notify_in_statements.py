"""Inserting statements announce new runs themselves; the statement trigger goes.

The AFTER INSERT trigger collected every inserted row in a transition table to notify idle
workers; the trigger statements notify in the statement itself now. Runs inserted by hand are
found by the workers' next scan, one poll interval at most.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from fairlane.schema.revision import drop_functions, drop_trigger

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    drop_trigger("runs_notify_inserted", "runs")
    drop_functions("notify_runs_inserted()")


def downgrade() -> None:
    """Nothing: the trigger and its function belonged to the SQL objects of an older release."""
