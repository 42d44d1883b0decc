"""The start-up schema check's statements (sql/schema/check.sql)."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from fairlane.engine.section import Section
from fairlane.engine.statement import Statement, scalar
from fairlane.schema.tables import VERSION_TABLE


class SchemaState(Section):
    def tables_exist(self) -> Statement[tuple[bool, bool]]:
        """Whether the version table and the schema_objects table exist."""
        params = {
            "version_table": sql.Identifier(self.schema, VERSION_TABLE).as_string(None),
            "objects_table": sql.Identifier(self.schema, "schema_objects").as_string(None),
        }
        return self._statement(
            "schema_tables_exist",
            params,
            lambda row: (bool(row["has_version"]), bool(row["has_objects"])),
        )

    def revision(self) -> Statement[str | None]:
        return self._statement("schema_revision", None, scalar)

    def state(self) -> Statement[tuple[str | None, dict[str, Any]]]:
        """The revision, and the checksum of every installed object by name."""
        return self._statement(
            "schema_state", None, lambda row: (row["version_num"], dict(row["objects"] or {}))
        )
