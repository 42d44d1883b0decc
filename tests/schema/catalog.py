"""A comparable picture of everything fairlane keeps in a schema, read from the catalog.

Two databases hold the same schema when their snapshots are equal: tables (and their storage
options), columns in order with type, nullability and default, indexes, constraints,
sequences, triggers, views, every function's ``pg_get_functiondef``, and the rows that
revisions seed (settings and periodic jobs by name).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

Snapshot = dict[str, dict[str, Any]]

_QUERIES: dict[str, str] = {
    "tables": """
        SELECT c.relname, coalesce(array_to_string(c.reloptions, ','), '')
        FROM pg_class c
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relkind IN ('r', 'p')
    """,
    "columns": """
        SELECT c.relname || '.' || lpad(row_number() OVER w::text, 3, '0') || '.' || a.attname,
               format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' NOT NULL'
                                                            ELSE '' END
               || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relkind IN ('r', 'p', 'v')
          AND a.attnum > 0 AND NOT a.attisdropped
        WINDOW w AS (PARTITION BY c.oid ORDER BY a.attnum)
    """,
    "indexes": """
        SELECT i.relname, pg_get_indexdef(i.oid)
        FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
        WHERE i.relnamespace = to_regnamespace(%(schema)s)
    """,
    "constraints": """
        SELECT c.relname || '.' || k.conname, pg_get_constraintdef(k.oid)
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
        WHERE c.relnamespace = to_regnamespace(%(schema)s)
    """,
    "sequences": """
        SELECT s.sequencename,
               concat_ws(' ', s.data_type, s.start_value, s.increment_by, s.min_value,
                         s.max_value, s.cycle, s.cache_size)
        FROM pg_sequences s WHERE s.schemaname = %(schema)s
    """,
    "triggers": """
        SELECT c.relname || '.' || t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND NOT t.tgisinternal
    """,
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid)
        FROM pg_class c
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relkind IN ('v', 'm')
    """,
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
        FROM pg_proc p WHERE p.pronamespace = to_regnamespace(%(schema)s)
    """,
}


def snapshot(conn: psycopg.Connection[Any], schema: str = "fairlane") -> Snapshot:
    found: Snapshot = {}
    with conn.transaction():
        # Catalog names come out schema-qualified and alike from every session.
        conn.execute("SET LOCAL search_path = pg_catalog")
        for part, statement in _QUERIES.items():
            rows = conn.execute(statement, {"schema": schema}).fetchall()
            found[part] = {str(key): value for key, value in rows}
        found["seeded"] = _seeded(conn, schema)
    return found


def _seeded(conn: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    """The rows revisions seed, by key: which settings and periodic jobs exist (their values
    are the user's to change), and the scheduler's single row."""
    seeded: dict[str, Any] = {}
    for table, key in (("settings", "name"), ("periodic_jobs", "name || ' -> ' || function")):
        qualified = sql.Identifier(schema, table)
        exists = conn.execute("SELECT to_regclass(%s)", (qualified.as_string(None),)).fetchone()
        if exists and exists[0]:
            statement = sql.SQL("SELECT {} FROM {}").format(sql.SQL(key), qualified)
            seeded[table] = sorted(str(row[0]) for row in conn.execute(statement).fetchall())
    return seeded


def differences(left: Snapshot, right: Snapshot) -> list[str]:
    """Every entry that one side has and the other has not, or has otherwise."""
    found: list[str] = []
    for part in sorted(left.keys() | right.keys()):
        a, b = left.get(part, {}), right.get(part, {})
        for key in sorted(a.keys() | b.keys()):
            if a.get(key) != b.get(key):
                found.append(f"{part} {key}: {a.get(key)!r} != {b.get(key)!r}")
    return found


def load_dump(conn: psycopg.Connection[Any], path: Path) -> None:
    """Run a plain-text pg_dump (made with --inserts) on an autocommit connection."""
    conn.execute(path.read_text("utf-8"))
