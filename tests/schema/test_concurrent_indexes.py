"""Indexes on large tables are built and dropped CONCURRENTLY (fairlane.schema.concurrent_index):
checked valid, picked up again after an interruption, and, unlike a plain build, never in the
way of a trigger. Every revision after the grandfathered ones keeps to it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from fairlane import trigger
from fairlane.errors import IndexBuildError
from fairlane.schema import migrate
from fairlane.schema.concurrent_index import (
    LARGE_TABLES,
    IndexDefinition,
    Run,
    build_index,
    index_state,
    replace_index,
    replacement_name,
)
from tests.helpers import poll
from tests.helpers.revisions import blocking_index_statements, statements_sent, with_revision

# The newest revision that landed before the rule: the ones up to it ran on earlier releases
# as they are (landed revisions are immutable), plain builds included.
GRANDFATHERED = "0022"


def runner(conn: psycopg.Connection[Any]) -> Run:
    def run(statement: sql.Composed) -> list[tuple[Any, ...]]:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []

    return run


def definition(db: psycopg.Connection[Any], name: str) -> str | None:
    row = db.execute("SELECT pg_get_indexdef(to_regclass(%s))", (f"fairlane.{name}",)).fetchone()
    return None if row is None else row[0]


def by_task(name: str = "runs_task_idx", *, unique: bool = False) -> IndexDefinition:
    return IndexDefinition("fairlane", name, "runs", "(task)", unique)


def test_a_build_is_checked_valid_and_kept_when_run_again(db: psycopg.Connection[Any]) -> None:
    run = runner(db)
    assert index_state(run, "fairlane", "runs_task_idx") is None
    assert build_index(run, by_task()) is True
    assert index_state(run, "fairlane", "runs_task_idx") is True
    assert build_index(run, by_task()) is False
    assert definition(db, "runs_task_idx") == (
        "CREATE INDEX runs_task_idx ON fairlane.runs USING btree (task)"
    )


def test_the_invalid_leftover_of_a_failed_build_is_dropped_and_built_again(
    db: psycopg.Connection[Any],
) -> None:
    run = runner(db)
    first = trigger(db, "twice", environment="acme")
    trigger(db, "twice", environment="acme")
    with pytest.raises(psycopg.errors.UniqueViolation):
        build_index(run, by_task("runs_task_key", unique=True))
    # What an interrupted concurrent build leaves: the index, invalid.
    assert index_state(run, "fairlane", "runs_task_key") is False

    db.execute("DELETE FROM fairlane.runs WHERE id <> %s", (first,))
    assert build_index(run, by_task("runs_task_key", unique=True)) is True
    assert index_state(run, "fairlane", "runs_task_key") is True


def test_a_replacement_is_built_aside_then_swapped_and_a_rerun_finishes_the_swap(
    db: psycopg.Connection[Any],
) -> None:
    run = runner(db)
    wider = IndexDefinition(
        "fairlane", "runs_parent_idx", "runs", "(parent_run_id, id) WHERE parent_run_id > 0"
    )
    replace_index(run, wider)
    assert definition(db, "runs_parent_idx") == (
        "CREATE INDEX runs_parent_idx ON fairlane.runs USING btree (parent_run_id, id)"
        " WHERE (parent_run_id > 0)"
    )
    assert definition(db, replacement_name("runs_parent_idx")) is None

    # Interrupted after the replacement was built, before the swap: a re-run swaps it in.
    narrower = IndexDefinition("fairlane", "runs_parent_idx", "runs", "(parent_run_id)")
    build_index(run, IndexDefinition("fairlane", "runs_parent_idx_next", "runs", "(parent_run_id)"))
    replace_index(run, narrower)
    assert definition(db, "runs_parent_idx") == (
        "CREATE INDEX runs_parent_idx ON fairlane.runs USING btree (parent_run_id)"
    )
    assert definition(db, "runs_parent_idx_next") is None
    assert index_state(run, "fairlane", "runs_parent_idx") is True


def test_a_name_postgresql_would_truncate_is_refused(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(IndexBuildError, match="longer than 63 bytes"):
        build_index(runner(db), by_task("runs_" + "x" * 59))
    with pytest.raises(IndexBuildError, match="longer than 63 bytes"):
        replacement_name("runs_" + "x" * 56)


def _locks(db: psycopg.Connection[Any], pid: int) -> set[tuple[str, bool]]:
    rows = db.execute(
        "SELECT mode, granted FROM pg_locks"
        " WHERE pid = %s AND relation = 'fairlane.runs'::regclass",
        (pid,),
    ).fetchall()
    return {(mode, granted) for mode, granted in rows}


def _blocked_by(db: psycopg.Connection[Any], pid: int) -> list[int]:
    row = db.execute("SELECT pg_blocking_pids(%s)", (pid,)).fetchone()
    return list(row[0]) if row else []


def test_a_plain_build_holds_up_every_trigger_and_a_concurrent_one_none(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The failure mode the helper guards against. A plain build waits for the writers in
    flight with its SHARE lock queued, and every trigger after it queues behind that for the
    whole build; a concurrent build waits with SHARE UPDATE EXCLUSIVE held, which no trigger
    conflicts with."""
    connect = psycopg.connect
    with (
        ThreadPoolExecutor(2) as pool,
        connect(dsn, autocommit=True) as builder,
        connect(dsn, autocommit=True) as producer,
    ):
        build_pid, trigger_pid = builder.info.backend_pid, producer.info.backend_pid
        with connect(dsn) as writer:
            trigger(writer, "in-flight", environment="acme")  # its transaction stays open
            plain_build = "CREATE INDEX runs_task_idx ON fairlane.runs (task)"
            plain = pool.submit(builder.execute, plain_build)
            poll(lambda: ("ShareLock", False) in _locks(db, build_pid), within=30, what="queued")
            held_up = pool.submit(trigger, producer, "after", environment="acme")
            poll(lambda: _blocked_by(db, trigger_pid) == [build_pid], within=30, what="held up")
            assert not held_up.done()
        plain.result(timeout=60)
        held_up.result(timeout=60)
        db.execute("DROP INDEX fairlane.runs_task_idx")

        with connect(dsn) as writer:
            trigger(writer, "in-flight", environment="acme")
            concurrent = pool.submit(build_index, runner(builder), by_task())
            poll(
                lambda: ("ShareUpdateExclusiveLock", True) in _locks(db, build_pid),
                within=30,
                what="the concurrent build under way",
            )
            # The build waits for the open writer meanwhile; a trigger goes through.
            assert trigger(producer, "during", environment="acme") > 0
            assert not concurrent.done()
            assert _locks(db, build_pid) == {("ShareUpdateExclusiveLock", True)}
        assert concurrent.result(timeout=60) is True
    assert index_state(runner(db), "fairlane", "runs_task_idx") is True


def _table_of(db: psycopg.Connection[Any]) -> dict[str, str]:
    rows = db.execute(
        "SELECT c.relname, t.relname FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid"
        " WHERE t.relnamespace = 'fairlane'::regnamespace"
    ).fetchall()
    return dict(rows)


def _blocking_revisions(dsn: str, migrations: Path | None = None) -> list[str]:
    """The plain index statements on large tables of the revisions after GRANDFATHERED."""
    migrate.upgrade(dsn, revision=GRANDFATHERED)
    with psycopg.connect(dsn, autocommit=True) as conn:
        table_of = _table_of(conn)
    with statements_sent() as sent:
        migrate.upgrade(dsn, migrations=migrations)
    return blocking_index_statements(sent, table_of, LARGE_TABLES)


def test_revisions_after_the_grandfathered_ones_index_large_tables_only_concurrently(
    empty_database: Any,
) -> None:
    assert _blocking_revisions(empty_database()) == []


def test_the_rule_catches_a_plain_index_statement_in_a_new_revision(
    empty_database: Any, tmp_path: Path
) -> None:
    """The check above means something: a new revision with each kind of index statement."""
    migrations, _ = with_revision(
        tmp_path,
        """
        target = schema()
        op.create_index("runs_task_idx", "runs", ["task"], schema=target)
        op.drop_index("runs_parent_idx", table_name="runs", schema=target)
        op.execute(f"CREATE INDEX waitpoints_kind_idx ON {target}.waitpoints (kind)")
        op.create_index("settings_value_idx", "settings", ["value"], schema=target)
        create_index_concurrently("runs_tags_idx", "runs", "USING gin (tags)")
        drop_index_concurrently("runs_delayed_queue_idx")
        """,
    )
    found = _blocking_revisions(empty_database(), migrations)
    assert found == [
        "CREATE INDEX runs_task_idx ON fairlane.runs (task)",
        "DROP INDEX fairlane.runs_parent_idx",
        "CREATE INDEX waitpoints_kind_idx ON fairlane.waitpoints (kind)",
    ]
