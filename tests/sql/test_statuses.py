"""The status sets of the SQL (sql/runs/statuses.sql) and of the package agree, and the
planner folds them into constants (they are IMMUTABLE), so a plan that names them reads an
array, not a function call per row."""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane.models import FINAL_STATUSES, RunStatus


def test_the_final_statuses_are_the_packages(db: psycopg.Connection[Any]) -> None:
    row = db.execute("SELECT fairlane.final_statuses()").fetchone()
    assert row is not None
    assert {RunStatus(status) for status in row[0]} == FINAL_STATUSES


def test_the_failed_statuses_are_the_final_ones_but_success_and_cancel(
    db: psycopg.Connection[Any],
) -> None:
    row = db.execute("SELECT fairlane.failed_statuses()").fetchone()
    assert row is not None
    assert {RunStatus(status) for status in row[0]} == FINAL_STATUSES - {
        RunStatus.COMPLETED,
        RunStatus.CANCELED,
    }


def test_the_sets_fold_into_constants(db: psycopg.Connection[Any]) -> None:
    (plan,) = db.execute(
        "EXPLAIN (VERBOSE, FORMAT JSON) SELECT id FROM fairlane.runs"
        " WHERE status = ANY(fairlane.final_statuses())"
        " AND status <> ALL(fairlane.failed_statuses())"
    ).fetchone() or (None,)
    text = str(plan)
    assert "final_statuses" not in text
    assert "failed_statuses" not in text
    assert "COMPLETED" in text
