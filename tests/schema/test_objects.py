"""The install step: what it re-creates, replaces, drops, and how two migrations take turns.

These tests install hand-written objects into a schema of their own (``probe``), so each kind
of change can be made on purpose: a body, an argument list, a return type under a view that
depends on it, a trigger's table, an object dropped by hand, one that left sql/.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from fairlane.engine.sqlfiles import parse_entries
from fairlane.errors import SchemaLockTimeoutError
from fairlane.schema import migrate
from fairlane.schema.install import install_objects
from fairlane.schema.objects import SqlObject, build_objects, manifest
from tests.schema.catalog import differences, snapshot

PROBE = "probe"
TABLES = """
CREATE SCHEMA probe;
CREATE TABLE probe.schema_objects (LIKE fairlane.schema_objects INCLUDING ALL);
CREATE TABLE probe.items (id int);
CREATE TABLE probe.other_items (id int);
"""


def objects(source: str) -> tuple[SqlObject, ...]:
    return build_objects(parse_entries(source), PROBE)


BASE = """
-- function: double_it
CREATE OR REPLACE FUNCTION {schema}.double_it(n integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT n * 2 $$;

-- view: doubled
CREATE OR REPLACE VIEW {schema}.doubled AS
SELECT {schema}.double_it(id) AS value FROM {schema}.items;

-- function: touch_items
CREATE OR REPLACE FUNCTION {schema}.touch_items() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END; $$;

-- trigger: items_touched
CREATE TRIGGER items_touched BEFORE INSERT ON {schema}.items
FOR EACH ROW EXECUTE FUNCTION {schema}.touch_items();
"""


@pytest.fixture
def probe(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    db.execute(TABLES)
    first = install_objects(db, PROBE, objects(BASE))
    assert sorted(first.created) == ["double_it", "doubled", "items_touched", "touch_items"]
    return db


def functions(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT p.oid::regprocedure::text, p.oid::bigint FROM pg_proc p"
        " WHERE p.pronamespace = 'probe'::regnamespace"
    ).fetchall()
    return {identity: oid for identity, oid in rows}


def _dependencies_first(ordered: tuple[SqlObject, ...]) -> bool:
    position = {obj.name: index for index, obj in enumerate(ordered)}
    return all(position[dep] < position[obj.name] for obj in ordered for dep in obj.depends_on)


def test_objects_come_in_dependency_order_whatever_the_file_order() -> None:
    view_first = "-- view: doubled" + "".join(reversed(BASE.split("-- view: doubled")))
    ordered = objects(view_first)
    assert ordered[0].name != "doubled"
    assert _dependencies_first(ordered)
    assert dict((obj.name, obj.depends_on) for obj in ordered)["doubled"] == ("double_it",)
    assert _dependencies_first(manifest("fairlane"))


def test_a_changed_body_is_replaced_in_place(probe: psycopg.Connection[Any]) -> None:
    before = functions(probe)
    changed = BASE.replace("SELECT n * 2", "SELECT n + n")
    result = install_objects(probe, PROBE, objects(changed))
    assert result.replaced == ["double_it"]
    assert result.unchanged == 3
    assert functions(probe) == before  # same oid: CREATE OR REPLACE
    assert probe.execute("SELECT probe.double_it(21)").fetchone() == (42,)


def test_a_new_argument_list_leaves_one_signature(probe: psycopg.Connection[Any]) -> None:
    changed = BASE.replace("double_it(n integer)", "double_it(n integer, times integer DEFAULT 2)")
    changed = changed.replace("SELECT n * 2", "SELECT n * times")
    result = install_objects(probe, PROBE, objects(changed))
    assert "double_it" in result.replaced
    identities = [identity for identity in functions(probe) if "double_it" in identity]
    assert identities == ["probe.double_it(integer,integer)"]
    recorded = probe.execute(
        "SELECT identity FROM probe.schema_objects WHERE name = 'double_it'"
    ).fetchone()
    assert recorded == ("probe.double_it(integer,integer)",)
    assert probe.execute("SELECT * FROM probe.doubled").fetchall() == []


def test_a_new_return_type_remakes_the_function_and_what_depends_on_it(
    probe: psycopg.Connection[Any],
) -> None:
    changed = BASE.replace("RETURNS integer\nLANGUAGE sql", "RETURNS bigint\nLANGUAGE sql")
    result = install_objects(probe, PROBE, objects(changed))
    assert result.replaced == ["double_it", "doubled"]
    row = probe.execute(
        "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
        " WHERE a.attrelid = 'probe.doubled'::regclass AND a.attname = 'value'"
    ).fetchone()
    assert row == ("bigint",)


def test_a_trigger_moved_to_another_table_leaves_the_first(probe: psycopg.Connection[Any]) -> None:
    changed = BASE.replace(
        "BEFORE INSERT ON {schema}.items", "BEFORE INSERT ON {schema}.other_items"
    )
    result = install_objects(probe, PROBE, objects(changed))
    assert result.replaced == ["items_touched"]
    rows = probe.execute(
        "SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = 'items_touched'"
    ).fetchall()
    assert rows == [("probe.other_items",)]


def test_a_changed_constraint_trigger_is_dropped_and_made_again(
    probe: psycopg.Connection[Any],
) -> None:
    """PostgreSQL will not CREATE OR REPLACE a constraint trigger: the install step drops the
    one it made before."""
    deferred = BASE.replace(
        "CREATE TRIGGER items_touched BEFORE INSERT ON {schema}.items\nFOR EACH ROW",
        "CREATE CONSTRAINT TRIGGER items_touched AFTER INSERT ON {schema}.items\n"
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW",
    ).replace("RETURN NEW;", "RETURN NULL;")
    assert install_objects(probe, PROBE, objects(deferred)).replaced == [
        "touch_items",
        "items_touched",
    ]
    changed = deferred.replace("AFTER INSERT ON", "AFTER INSERT OR UPDATE ON")
    assert install_objects(probe, PROBE, objects(changed)).replaced == ["items_touched"]
    rows = probe.execute(
        "SELECT tgdeferrable, tginitdeferred, tgtype FROM pg_trigger WHERE tgname = 'items_touched'"
    ).fetchall()
    assert rows == [(True, True, 1 | 4 | 16)]  # row, insert, update


def test_an_object_dropped_by_hand_is_made_again(probe: psycopg.Connection[Any]) -> None:
    probe.execute("DROP VIEW probe.doubled")
    result = install_objects(probe, PROBE, objects(BASE))
    assert result.replaced == ["doubled"]
    assert result.unchanged == 3


def test_objects_that_left_sql_are_dropped(probe: psycopg.Connection[Any]) -> None:
    kept = BASE.split("-- function: touch_items")[0]
    result = install_objects(probe, PROBE, objects(kept))
    assert sorted(result.dropped) == ["items_touched", "touch_items"]
    assert list(functions(probe)) == ["probe.double_it(integer)"]
    names = probe.execute("SELECT name FROM probe.schema_objects ORDER BY name").fetchall()
    assert names == [("double_it",), ("doubled",)]


def _waiting_for_the_lock(conn: psycopg.Connection[Any], sessions: int) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    return row is not None and row[0] >= sessions


def test_two_migrations_at_once_take_turns(
    empty_database: Any, db: psycopg.Connection[Any]
) -> None:
    dsn = empty_database()
    fresh = snapshot(db)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            migrate.upgrade(dsn)
        except BaseException as error:  # reported below
            errors.append(error)

    with psycopg.connect(dsn, autocommit=True) as holder:
        # Hold the migration lock, start two migrations, and let them go only once both wait.
        holder.execute(
            "SELECT pg_advisory_lock(hashtext('fairlane.migrate'), hashtext('fairlane'))"
        )
        threads = [threading.Thread(target=run) for _ in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while not _waiting_for_the_lock(holder, 2):
            assert time.monotonic() < deadline, "the migrations never queued on the lock"
            time.sleep(0.01)
        holder.execute("SELECT pg_advisory_unlock_all()")
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        assert differences(snapshot(holder), fresh) == []


def test_an_object_an_older_release_made_is_dropped_when_it_leaves_sql(
    db: psycopg.Connection[Any],
) -> None:
    """Releases before schema_objects recorded nothing: a function they made that sql/ no
    longer defines is still known to be fairlane's (UNRECORDED_LEGACY) and dropped."""
    db.execute("DELETE FROM fairlane.schema_objects WHERE name = 'take_rate_tokens'")
    without = tuple(obj for obj in manifest("fairlane") if obj.name != "take_rate_tokens")
    result = install_objects(db, "fairlane", without)
    assert result.dropped == ["take_rate_tokens"]
    assert not result.created
    assert not result.replaced
    left = db.execute(
        "SELECT count(*) FROM pg_proc WHERE proname = 'take_rate_tokens'"
        " AND pronamespace = 'fairlane'::regnamespace"
    ).fetchone()
    assert left == (0,)


def _checksums(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return dict(conn.execute("SELECT name, checksum FROM probe.schema_objects").fetchall())


def test_a_trigger_lock_held_by_a_long_transaction_is_waited_for_in_short_attempts(
    probe: psycopg.Connection[Any], dsn: str
) -> None:
    """Making a trigger again needs ACCESS EXCLUSIVE on its table. Behind a transaction that
    holds the table, each attempt gives up after lock_timeout (its queued request would hold up
    every statement on the table after it) and leaves nothing half done."""
    changed = objects(BASE.replace("BEFORE INSERT ON", "BEFORE INSERT OR UPDATE ON"))
    before = _checksums(probe)
    with psycopg.connect(dsn) as long_transaction:
        long_transaction.execute("INSERT INTO probe.items VALUES (1)")
        with pytest.raises(SchemaLockTimeoutError, match=r"within 0\.05 s in 3 attempts"):
            install_objects(probe, PROBE, changed, lock_timeout_s=0.05, attempts=3)
        assert _checksums(probe) == before
        # No lock request was left queued: a writer after the attempts goes straight through.
        with psycopg.connect(dsn, autocommit=True) as writer:
            writer.execute("INSERT INTO probe.items VALUES (2)")
    result = install_objects(probe, PROBE, changed)
    assert result.replaced == ["items_touched"]
    assert _checksums(probe) != before
