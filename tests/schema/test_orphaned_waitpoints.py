"""The upgrade to 0022 removes the time waitpoints an older pruning left behind (no edge
points to them), and keeps every waitpoint something still waits on or may read."""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane.schema import migrate


def test_the_upgrade_removes_time_waitpoints_no_run_waits_on(empty_database: Any) -> None:
    dsn = empty_database()
    migrate.upgrade(dsn, revision="0021")
    with psycopg.connect(dsn, autocommit=True) as conn:

        def waitpoint(kind: str) -> int:
            row = conn.execute(
                "INSERT INTO fairlane.waitpoints (kind, complete_after) VALUES (%s, now())"
                " RETURNING id",
                (kind,),
            ).fetchone()
            assert row is not None
            return int(row[0])

        orphan, awaited, token = waitpoint("DATETIME"), waitpoint("DATETIME"), waitpoint("MANUAL")
        conn.execute(
            "INSERT INTO fairlane.run_waitpoints (run_id, attempt, position, item, waitpoint_id)"
            " VALUES (1, 1, 0, 0, %s)",
            (awaited,),
        )
        migrate.upgrade(dsn)
        left = {row[0] for row in conn.execute("SELECT id FROM fairlane.waitpoints")}
    assert left == {awaited, token}
    assert orphan not in left
