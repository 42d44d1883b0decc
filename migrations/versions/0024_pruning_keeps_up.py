"""Pruning keeps up: a tick deletes until caught up or its time budget is spent.

``prune_budget_s`` is the time a ``prune_finished_runs`` tick may spend deleting; a tick that
stops with work left is due again at once (sql/maintenance/runner.sql). ``prune_max_batches``
stays as a cap on the statements of one tick, raised from 10 to 100 where it was left at its
default, so the budget is what normally ends a tick that is behind. The job runs every 10 s
instead of every 60 s where its interval was left at the default: the table then holds the
retention and at most 10 s more, and each tick deletes a sixth as much (docs/decisions.md).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from fairlane.schema.revision import execute

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute(
        """
        INSERT INTO {schema}.settings (name, value, description) VALUES
            ('prune_budget_s', '1', 'Seconds a prune_finished_runs tick may spend deleting; one that stops with work left runs again at once')
        ON CONFLICT (name) DO NOTHING
        """  # noqa: E501
    )
    execute(
        """
        UPDATE {schema}.settings
        SET value = CASE WHEN value = '10'::jsonb THEN '100'::jsonb ELSE value END,
            description = 'Statements per prune_finished_runs tick at most (the budget usually ends it first)'
        WHERE name = 'prune_max_batches'
        """  # noqa: E501
    )
    execute(
        """
        UPDATE {schema}.periodic_jobs SET interval_s = 10
        WHERE name = 'prune_finished_runs' AND interval_s = 60
        """
    )


def downgrade() -> None:
    execute(
        """
        UPDATE {schema}.periodic_jobs SET interval_s = 60
        WHERE name = 'prune_finished_runs' AND interval_s = 10
        """
    )
    execute("DELETE FROM {schema}.settings WHERE name = 'prune_budget_s'")
    execute(
        """
        UPDATE {schema}.settings
        SET value = CASE WHEN value = '100'::jsonb THEN '10'::jsonb ELSE value END,
            description = 'Statements per prune_finished_runs tick'
        WHERE name = 'prune_max_batches'
        """
    )
