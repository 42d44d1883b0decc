"""Row types read by column: ``ByColumns`` finds its columns by name once per statement and
then reads each row by position."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fairlane.engine.statement import ByColumns


@dataclass(frozen=True)
class Pair:
    left: int
    right: str


PAIR = ByColumns(("left", "right"), Pair)


def test_columns_are_found_by_name_whatever_their_order() -> None:
    read = PAIR.reader(["right", "extra", "left"])
    assert read(("b", None, 1)) == Pair(1, "b")
    assert read(("c", 7, 2)) == Pair(2, "c")


def test_a_row_as_a_mapping_reads_the_same() -> None:
    assert PAIR({"right": "b", "left": 1, "extra": None}) == Pair(1, "b")


def test_a_missing_column_is_named() -> None:
    with pytest.raises(LookupError, match="no column right"):
        PAIR.reader(["left", "extra"])


def test_one_column_is_passed_as_it_is() -> None:
    read = ByColumns(("id",), int).reader(["other", "id"])
    assert read(("x", 7)) == 7
