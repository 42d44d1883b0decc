"""Rows read off the server: scalar statements and ``ByColumns`` rows, which skip the dict
per row, against real result sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from fairlane.engine.statement import ByColumns, Statement, rows, scalar


@dataclass(frozen=True)
class Named:
    id: int
    name: str


def test_a_scalar_statement_reads_its_one_column(db: psycopg.Connection[Any]) -> None:
    statement = Statement("ids", "SELECT generate_series(1, 3) AS id", None, scalar)
    assert rows(db, statement) == [1, 2, 3]


def test_a_scalar_statement_of_two_columns_is_refused(db: psycopg.Connection[Any]) -> None:
    statement = Statement("two", "SELECT 1 AS id, 2 AS other", None, scalar)
    with pytest.raises(ValueError, match="2 columns"):
        rows(db, statement)


def test_by_columns_reads_by_name_in_any_column_order(db: psycopg.Connection[Any]) -> None:
    statement = Statement(
        "named",
        "SELECT 'b' AS name, n AS id, true AS extra FROM generate_series(1, 2) AS n",
        None,
        ByColumns(("id", "name"), Named),
    )
    assert rows(db, statement) == [Named(1, "b"), Named(2, "b")]
