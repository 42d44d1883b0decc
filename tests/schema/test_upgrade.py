"""An upgraded database ends exactly where a fresh install does.

The ``dsn`` database is a fresh install (the session's template went through
``migrate.upgrade``). The others start empty and are upgraded: from the oldest revision, one
revision at a time, and from a dump of a database that the last release before the install
step (revision 0009) migrated and filled with runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane import Client, RunStatus
from fairlane.errors import SchemaMismatchError
from fairlane.schema import migrate
from fairlane.schema.check import SCHEMA_REVISION, check_schema
from fairlane.schema.install import install_objects
from fairlane.schema.objects import SqlObject, checksum, manifest
from tests.schema.catalog import Snapshot, differences, load_dump, snapshot

DUMP_0009 = Path(__file__).parent / "fixtures" / "fairlane_0009.sql"


@pytest.fixture
def fresh(db: psycopg.Connection[Any]) -> Snapshot:
    return snapshot(db)


def _revisions() -> list[str]:
    head = migrate.head_revision()
    assert head is not None
    return [f"{n:04d}" for n in range(1, int(head) + 1)]


def test_upgrading_revision_by_revision_from_the_oldest_ends_like_a_fresh_install(
    fresh: Snapshot, empty_database: Any
) -> None:
    dsn = empty_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for revision in _revisions()[:-1]:
            # Revisions stop short of head: they make tables only, and each runs on its own.
            assert migrate.upgrade(dsn, revision=revision) is None
            assert migrate.current_revision(dsn) == revision
            assert snapshot(conn)["functions"] == {}
            if revision == "0001":
                conn.execute(
                    "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
                    " VALUES ('acme', 'images', 'resize', '{}', 'QUEUED')"
                )
        installed = migrate.upgrade(dsn)
        assert installed is not None
        assert installed.created == [obj.name for obj in manifest("fairlane")]
        assert differences(snapshot(conn), fresh) == []
        # 0002 backfilled the environment and queue of the run that was already there.
        rows = conn.execute("SELECT environment, name FROM fairlane.queues").fetchall()
        assert rows == [("acme", "images")]


def test_a_database_the_previous_release_migrated_upgrades_to_a_fresh_install(
    fresh: Snapshot, empty_database: Any
) -> None:
    dsn = empty_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        load_dump(conn, DUMP_0009)
        assert migrate.current_revision(dsn) == "0009"
        before: dict[int, str] = dict(
            conn.execute("SELECT id, status FROM fairlane.runs").fetchall()
        )
        needs = f"at 0009, this fairlane needs {SCHEMA_REVISION}"
        with pytest.raises(SchemaMismatchError, match=needs):
            check_schema(conn, "fairlane")
        functions_before = {
            name
            for (name,) in conn.execute(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'fairlane'::regnamespace"
            )
        }

        installed = migrate.upgrade(dsn)

        assert installed is not None
        # The functions of that release that sql/ no longer has go, and nothing else.
        current = {obj.name for obj in manifest("fairlane")}
        assert sorted(installed.dropped) == sorted(functions_before - current)
        assert sorted(installed.created) == sorted(obj.name for obj in manifest("fairlane"))
        assert differences(snapshot(conn), fresh) == []
        check_schema(conn, "fairlane")
        # The runs are all there, and what they were doing goes on under the new functions: the
        # waiting parent's child finishes, its waitpoint completes and the parent is woken.
        assert dict(conn.execute("SELECT id, status FROM fairlane.runs").fetchall()) == before
        (parent, child) = conn.execute(
            "SELECT id FROM fairlane.runs WHERE task IN ('parent', 'child') ORDER BY id"
        ).fetchall()
        conn.execute(
            "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now(),"
            " result = '42' WHERE id = %s",
            child,
        )
        ready = conn.execute("SELECT resume_ready FROM fairlane.runs WHERE id = %s", parent)
        assert ready.fetchone() == (True,)
    with Client(dsn) as client:
        run = client.get_run(client.trigger("after-upgrade", environment="acme"))
    assert run.status is RunStatus.QUEUED


def _edited(objects: tuple[SqlObject, ...], name: str) -> list[SqlObject]:
    """The objects with ``name``'s body edited, the way a change to its file in sql/ would."""
    edited: list[SqlObject] = []
    for obj in objects:
        if obj.name == name:
            assert "BEGIN" in obj.statement
            obj = replace(obj, statement=obj.statement.replace("BEGIN", "BEGIN\n    NULL;", 1))
        edited.append(obj)
    return edited


def _rechecked(objects: list[SqlObject]) -> list[SqlObject]:
    return [replace(obj, checksum=checksum(obj.statement)) for obj in objects]


def test_the_comparison_sees_a_function_edit_the_install_step_missed(
    db: psycopg.Connection[Any], dsn: str, empty_database: Any
) -> None:
    """If an edit in sql/ kept its checksum (the install step would not re-create it), the
    database upgraded before the edit differs from a fresh install made after it."""
    current = manifest("fairlane")
    edited = _edited(current, "resume_run")
    fresh_dsn = empty_database()
    migrate.upgrade(fresh_dsn, revision=_revisions()[-1])
    with psycopg.connect(fresh_dsn, autocommit=True) as fresh_conn:
        install_objects(fresh_conn, "fairlane", _rechecked(edited))
        after_edit = snapshot(fresh_conn)

    missed = install_objects(db, "fairlane", edited)  # stale checksums: nothing to do
    assert not missed.changed
    found = differences(snapshot(db), after_edit)
    assert len(found) == 1, found
    assert found[0].startswith("functions fairlane.resume_run("), found


def test_a_function_edited_in_sql_is_replaced_and_nothing_else(
    db: psycopg.Connection[Any],
) -> None:
    edited = _rechecked(_edited(manifest("fairlane"), "resume_run"))
    before = _object_versions(db)
    result = install_objects(db, "fairlane", edited)
    assert result.replaced == ["resume_run"]
    assert not result.created
    assert not result.dropped
    after = _object_versions(db)
    changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    assert changed == {"resume_run"}


def _object_versions(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Each function's and trigger's catalog row version (its xmin) and oid."""
    rows = conn.execute(
        "SELECT p.proname, p.oid::bigint, p.xmin::text FROM pg_proc p"
        " WHERE p.pronamespace = 'fairlane'::regnamespace"
        " UNION ALL SELECT t.tgname, t.oid::bigint, t.xmin::text FROM pg_trigger t"
        " JOIN pg_class c ON c.oid = t.tgrelid"
        " WHERE c.relnamespace = 'fairlane'::regnamespace AND NOT t.tgisinternal"
    ).fetchall()
    return {name: (oid, xmin) for name, oid, xmin in rows}


def test_migrating_twice_changes_nothing_the_second_time(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    before = _object_versions(db)
    recorded = db.execute("SELECT * FROM fairlane.schema_objects ORDER BY name").fetchall()
    second = migrate.upgrade(dsn)
    assert second is not None
    assert not second.changed
    assert second.unchanged == len(manifest("fairlane"))
    assert _object_versions(db) == before
    assert db.execute("SELECT * FROM fairlane.schema_objects ORDER BY name").fetchall() == recorded


def test_the_comparison_sees_an_edited_revision(
    db: psycopg.Connection[Any], fresh: Snapshot
) -> None:
    """A revision edited after it landed changes fresh installs only; the comparison sees what
    such an edit leaves behind (revision_drift refuses the edit itself)."""
    db.execute("ALTER TABLE fairlane.runs ADD COLUMN stray integer")
    db.execute("CREATE INDEX runs_stray_idx ON fairlane.runs (stray)")
    db.execute("INSERT INTO fairlane.settings (name, value) VALUES ('stray', '1')")
    found = differences(snapshot(db), fresh)
    assert any(entry.startswith("columns runs.") and ".stray:" in entry for entry in found)
    assert any(entry.startswith("indexes runs_stray_idx:") for entry in found)
    assert any(entry.startswith("seeded settings:") for entry in found)
