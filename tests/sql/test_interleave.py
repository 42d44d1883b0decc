"""The interleaving harness itself: a barrier tells a blocked statement from a finished one."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.helpers.interleave import sessions


def test_a_statement_waiting_for_a_lock_is_seen_waiting(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE probe (id int PRIMARY KEY, n int)")
    db.execute("INSERT INTO probe VALUES (1, 0), (2, 0)")
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        a.run("UPDATE probe SET n = n + 1 WHERE id = 1")
        free = b.start("UPDATE probe SET n = n + 1 WHERE id = 2")
        assert not b.blocked_or_done()
        free.result()
        waiting = b.start("UPDATE probe SET n = n + 1 WHERE id = 1 RETURNING n")
        b.blocked()
        assert b.blockers() == [a.pid]
        a.commit()
        assert waiting.result(timeout=10) == [(2,)]
        b.commit()
    assert db.execute("SELECT n FROM probe ORDER BY id").fetchall() == [(2,), (1,)]
