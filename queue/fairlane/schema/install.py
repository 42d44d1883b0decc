"""The repeatable step that installs the SQL objects of ``sql/`` after every upgrade.

Revisions own tables, columns, indexes, constraints and data; every object lives in ``sql/``
under a ``-- function:``, ``-- trigger:`` or ``-- view:`` header and is installed here at the
end of every upgrade: in dependency order, in one transaction, under the migration lock.
``<schema>.schema_objects`` records each object's checksum (of its rendered statement), so an
upgrade re-creates exactly the objects whose text changed (or that went missing), drops the
ones that left ``sql/``, and leaves the rest alone: a second ``fairlane migrate`` touches
nothing.

A function is replaced in place (``CREATE OR REPLACE``) when PostgreSQL allows it; when its
return type or parameter names changed it is dropped and created, and so are the triggers and
views of ``sql/`` that depend on it. A changed argument list makes a new overload: the old one
is dropped, so only the current signature remains. A constraint trigger (``CREATE CONSTRAINT
TRIGGER``, which PostgreSQL will not replace) is dropped and created.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from fairlane.errors import SchemaLockTimeoutError, SchemaObjectError
from fairlane.schema.catalog import (
    catalog_objects,
    drop_statement,
    overloads,
    present_objects,
    recorded_objects,
    trigger_identity,
    view_identity,
)
from fairlane.schema.objects import UNRECORDED_LEGACY, SqlObject, manifest

Conn = psycopg.Connection[Any]

# How long the install step waits for a table lock (a trigger made again) before it lets go and
# tries again: well under what a trigger or claim may wait. The pauses between attempts grow.
LOCK_TIMEOUT_S = 0.5
LOCK_ATTEMPTS = 30
LOCK_PAUSE_S = 0.2
LOCK_PAUSE_MAX_S = 2.0


@dataclass(slots=True)
class InstallResult:
    """What one run of the install step did, by object name."""

    created: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    unchanged: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.replaced or self.dropped)


def migration_lock(schema: str, function: str = "pg_advisory_xact_lock") -> sql.Composed:
    """A call of ``function`` on the advisory lock that serialises the migrations of one schema
    (revisions and objects): taken per transaction here, per session by ``migrate``."""
    return sql.SQL("SELECT {}(hashtext('fairlane.migrate'), hashtext({}))").format(
        sql.Identifier(function), sql.Literal(schema)
    )


def install_objects(
    conn: Conn,
    schema: str,
    objects: Sequence[SqlObject] | None = None,
    *,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    attempts: int = LOCK_ATTEMPTS,
) -> InstallResult:
    """Bring the schema's functions, triggers and views to ``objects`` (default: ``sql/``), in
    one transaction. Returns what changed.

    Making a trigger again locks its table ACCESS EXCLUSIVE, and a lock request that waits
    behind a running transaction makes every later statement on the table wait behind it: each
    lock is waited for at most ``lock_timeout_s``, and the transaction is tried again (up to
    ``attempts`` times, a pause between) rather than holding up the table's writes."""
    wanted = list(objects if objects is not None else manifest(schema))
    for attempt in range(1, attempts + 1):
        try:
            return _install_once(conn, schema, wanted, lock_timeout_s)
        except psycopg.errors.LockNotAvailable as error:
            if attempt == attempts:
                raise SchemaLockTimeoutError(schema, attempts, lock_timeout_s) from error
            time.sleep(min(LOCK_PAUSE_S * attempt, LOCK_PAUSE_MAX_S))
    raise AssertionError("unreachable")


def _install_once(
    conn: Conn, schema: str, wanted: list[SqlObject], lock_timeout_s: float
) -> InstallResult:
    with conn.transaction():
        conn.execute(migration_lock(schema))
        conn.execute(
            "SELECT set_config('lock_timeout', %s, true)", (f"{round(lock_timeout_s * 1000)}ms",)
        )
        # Catalog names (regprocedure, regclass) come out schema-qualified whatever the role's
        # search_path, so recorded identities compare and drop the same from any session.
        conn.execute("SET LOCAL search_path = pg_catalog")
        installer = _Installer(conn, schema, wanted)
        return installer.run()


class _Installer:
    def __init__(self, conn: Conn, schema: str, wanted: list[SqlObject]) -> None:
        self.conn = conn
        self.schema = schema
        self.wanted = wanted
        self.by_name = {obj.name: obj for obj in wanted}
        self.recorded = recorded_objects(conn, schema)
        self.present = present_objects(conn, schema)
        self.result = InstallResult()
        # Objects that must be made again whatever their checksum says (a dependency of theirs
        # was dropped and made again).
        self.forced: set[str] = set()

    def run(self) -> InstallResult:
        removed = [name for name in self.recorded if name not in self.by_name]
        for name in removed:
            if self.recorded[name][0] != "function":
                self._droprecorded_objects(name)
        self._drop_unrecorded_legacy("trigger")
        for obj in self.wanted:
            if self._up_to_date(obj):
                self.result.unchanged += 1
                continue
            identity = self._install(obj)
            self._record(obj, identity)
        for name in removed:
            if self.recorded[name][0] == "function":
                self._droprecorded_objects(name)
        self._drop_unrecorded_legacy("function")
        return self.result

    def _drop_unrecorded_legacy(self, kind: str) -> None:
        """Objects an older release made that sql/ no longer defines and that were never
        recorded (they predate schema_objects)."""
        for name, found_kind, identity in catalog_objects(self.conn, self.schema):
            if (
                found_kind == kind
                and name in UNRECORDED_LEGACY
                and name not in self.by_name
                and name not in self.recorded
            ):
                self._drop(name, kind, identity)
                self.result.dropped.append(name)

    def _up_to_date(self, obj: SqlObject) -> bool:
        recorded = self.recorded.get(obj.name)
        return (
            obj.name not in self.forced
            and recorded is not None
            and recorded[2] == obj.checksum
            and recorded[1] in self.present.get(obj.name, set())
        )

    def _install(self, obj: SqlObject) -> str:
        (self.result.replaced if obj.name in self.recorded else self.result.created).append(
            obj.name
        )
        if obj.kind == "function":
            return self._install_function(obj)
        if obj.kind == "trigger":
            old = self.recorded.get(obj.name)
            identity = trigger_identity(self.conn, self.schema, obj)
            if old is not None and old[1] != identity and old[1] in self.present.get(obj.name, ()):
                self._drop(obj.name, "trigger", old[1])
            # CREATE OR REPLACE TRIGGER needs PostgreSQL 14 and cannot replace a constraint
            # trigger: drop and create in the install's transaction instead, so that no
            # statement ever sees the table without it.
            if identity in self.present.get(obj.name, ()):
                self._drop(obj.name, "trigger", identity)
            self.conn.execute(obj.statement)
            return identity
        try:
            with self.conn.transaction():
                self.conn.execute(obj.statement)
        except psycopg.errors.InvalidTableDefinition:
            # CREATE OR REPLACE VIEW cannot drop or retype columns: make it again.
            self._drop(obj.name, "view", view_identity(self.conn, self.schema, obj.name))
            self.conn.execute(obj.statement)
        return view_identity(self.conn, self.schema, obj.name)

    def _install_function(self, obj: SqlObject) -> str:
        before = overloads(self.conn, self.schema, obj.name)
        try:
            with self.conn.transaction():
                self.conn.execute(obj.statement)
        except (psycopg.errors.InvalidFunctionDefinition, psycopg.errors.WrongObjectType):
            # Its return type or parameter names changed, or it became a procedure (or back):
            # CREATE OR REPLACE refuses.
            self._drop_dependents(obj.name)
            for identity in before:
                self._drop(obj.name, "function", identity)
            self.conn.execute(obj.statement)
            before = set()
        after = overloads(self.conn, self.schema, obj.name)
        made = after - before or (after if len(after) == 1 else set())
        if len(made) != 1:
            raise SchemaObjectError(
                obj.name, f"cannot tell which of {sorted(after)} its statement made"
            )
        (identity,) = made
        for stale in sorted(after - made):
            self._drop_dependents(obj.name)
            self._drop(obj.name, "function", stale)
        return identity

    def _drop_dependents(self, name: str) -> None:
        """Drop the triggers and views of sql/ that depend on ``name`` (directly or through
        others), and make them again later in this run."""
        for obj in self.wanted:
            if obj.name in self.forced or not self._depends(obj, name):
                continue
            self.forced.add(obj.name)
            if obj.kind in ("trigger", "view"):
                recorded = self.recorded.get(obj.name)
                identity = recorded[1] if recorded else None
                if identity is None and obj.kind == "trigger":
                    identity = trigger_identity(self.conn, self.schema, obj)
                elif identity is None:
                    identity = view_identity(self.conn, self.schema, obj.name)
                self._drop(obj.name, obj.kind, identity)

    def _depends(self, obj: SqlObject, name: str) -> bool:
        seen: set[str] = set()
        stack = list(obj.depends_on)
        while stack:
            current = stack.pop()
            if current == name:
                return True
            if current not in seen and current in self.by_name:
                seen.add(current)
                stack.extend(self.by_name[current].depends_on)
        return False

    def _droprecorded_objects(self, name: str) -> None:
        kind, identity, _ = self.recorded[name]
        self._drop(name, kind, identity)
        self.conn.execute(
            sql.SQL("DELETE FROM {}.schema_objects WHERE name = {}").format(
                sql.Identifier(self.schema), sql.Literal(name)
            )
        )
        self.result.dropped.append(name)

    def _drop(self, name: str, kind: str, identity: str) -> None:
        self.conn.execute(drop_statement(kind, identity))
        self.present.get(name, set()).discard(identity)

    def _record(self, obj: SqlObject, identity: str) -> None:
        self.conn.execute(
            sql.SQL(
                "INSERT INTO {}.schema_objects (name, kind, identity, checksum) "
                "VALUES ({}, {}, {}, {}) ON CONFLICT (name) DO UPDATE "
                "SET kind = EXCLUDED.kind, identity = EXCLUDED.identity, "
                "checksum = EXCLUDED.checksum, installed_at = now()"
            ).format(
                sql.Identifier(self.schema),
                sql.Literal(obj.name),
                sql.Literal(obj.kind),
                sql.Literal(identity),
                sql.Literal(obj.checksum),
            )
        )
        self.present.setdefault(obj.name, set()).add(identity)


# -- dropping everything (``fairlane migrate --downgrade base``) -----------------------------


def drop_objects(conn: Conn, schema: str) -> list[str]:
    """Drop every trigger, view and function of fairlane's in the schema: the ones recorded,
    the ones ``sql/`` defines and the ones older releases made. Returns their identities.
    Run it inside a transaction (its search_path setting is local to it)."""
    conn.execute("SET LOCAL search_path = pg_catalog")
    names = {obj.name for obj in manifest(schema)} | UNRECORDED_LEGACY
    has_table = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".schema_objects',)
    ).fetchone()
    if has_table and has_table[0]:
        names |= set(recorded_objects(conn, schema))
    found = [item for item in catalog_objects(conn, schema) if item[0] in names]
    dropped: list[str] = []
    for kind in ("trigger", "view", "function"):
        for _name, found_kind, identity in sorted(found):
            if found_kind == kind:
                conn.execute(drop_statement(kind, identity))
                dropped.append(identity)
    return dropped
