"""What the catalog holds of fairlane's SQL objects in a schema, and how to name and drop them.

Identities are the catalog's own spelling (``regprocedure``, ``regclass``), so a recorded one
compares equal to what the catalog lists and can be dropped as it is.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from fairlane.schema.objects import SqlObject

Conn = psycopg.Connection[Any]


def drop_statement(kind: str, identity: str) -> sql.Composed:
    # Identities come from the catalog (regprocedure, regclass), already quoted as needed. A
    # "function" of sql/ may be a procedure: ROUTINE drops either.
    keyword = {"function": "ROUTINE", "trigger": "TRIGGER", "view": "VIEW"}[kind]
    return sql.SQL("DROP {} IF EXISTS {}").format(sql.SQL(keyword), sql.SQL(identity))


def trigger_identity(conn: Conn, schema: str, obj: SqlObject) -> str:
    return f"{quote_ident(conn, obj.name)} ON {regclass(conn, schema, obj.table or '')}"


def view_identity(conn: Conn, schema: str, name: str) -> str:
    return regclass(conn, schema, name)


def regclass(conn: Conn, schema: str, name: str) -> str:
    """How the catalog spells a relation (what _catalog returns), even before it exists."""
    qualified = sql.Identifier(schema, name).as_string(None)
    row = conn.execute(
        "SELECT coalesce(to_regclass(%s)::text, quote_ident(%s) || '.' || quote_ident(%s))",
        (qualified, schema, name),
    ).fetchone()
    assert row is not None
    return str(row[0])


def quote_ident(conn: Conn, name: str) -> str:
    row = conn.execute("SELECT quote_ident(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def overloads(conn: Conn, schema: str, name: str) -> set[str]:
    rows = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.pronamespace = to_regnamespace(%s) AND p.proname = %s",
        (schema, name),
    ).fetchall()
    return {identity for (identity,) in rows}


def recorded_objects(conn: Conn, schema: str) -> dict[str, tuple[str, str, str]]:
    """name -> (kind, identity, checksum) of what the install step recorded."""
    table = sql.Identifier(schema, "schema_objects")
    rows = conn.execute(
        sql.SQL("SELECT name, kind, identity, checksum FROM {}").format(table)
    ).fetchall()
    return {name: (kind, identity, digest) for name, kind, identity, digest in rows}


def catalog_objects(conn: Conn, schema: str) -> list[tuple[str, str, str]]:
    """(name, kind, identity) of every function, trigger and view in the schema now."""
    rows = conn.execute(
        """
        SELECT p.proname, 'function', p.oid::regprocedure::text FROM pg_proc p
        WHERE p.pronamespace = to_regnamespace(%(schema)s)
        UNION ALL
        SELECT t.tgname, 'trigger', quote_ident(t.tgname) || ' ON ' || t.tgrelid::regclass::text
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND NOT t.tgisinternal
        UNION ALL
        SELECT c.relname, 'view', c.oid::regclass::text FROM pg_class c
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relkind = 'v'
        """,
        {"schema": schema},
    ).fetchall()
    return [(str(name), str(kind), str(identity)) for name, kind, identity in rows]


def present_objects(conn: Conn, schema: str) -> dict[str, set[str]]:
    present: dict[str, set[str]] = {}
    for name, _kind, identity in catalog_objects(conn, schema):
        present.setdefault(name, set()).add(identity)
    return present
