"""The ``-- params:`` lines of a named statement: read in order, across lines, and refused
when a line cannot be read or names a parameter twice."""

from __future__ import annotations

import pytest

from fairlane.engine.sqlfiles import Param, parse_entries
from fairlane.errors import SchemaObjectError


def test_params_are_read_in_order_across_lines() -> None:
    (entry,) = parse_entries(
        "-- name: probe\n"
        "-- params: ids bigint[], at timestamp with time zone,\n"
        "-- params: lease_s double precision\n"
        "-- a comment\n"
        "SELECT %(ids)s, %(at)s, %(lease_s)s;\n"
    )
    assert entry.params == (
        Param("ids", "bigint[]"),
        Param("at", "timestamp with time zone"),
        Param("lease_s", "double precision"),
    )
    assert "params" not in entry.template


def test_a_statement_without_params_declares_none() -> None:
    (entry,) = parse_entries("-- name: probe\nSELECT 1;\n")
    assert entry.params == ()


@pytest.mark.parametrize(
    "line",
    ["-- params: ids", "-- params: ids bigint[], ids bigint[]", "-- params: 1d text"],
)
def test_an_unreadable_declaration_is_refused(line: str) -> None:
    with pytest.raises(SchemaObjectError, match="probe"):
        parse_entries(f"-- name: probe\n{line}\nSELECT 1;\n")
