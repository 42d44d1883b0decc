"""Running ``fairlane bench`` in-process and finding the databases it leaves."""

from __future__ import annotations

import json
import os
from typing import Any

import psycopg
import pytest

from fairlane.cli import main


def bench(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["bench", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    result: dict[str, Any] = json.loads(lines[0])
    return result


def bench_databases(db: psycopg.Connection[Any]) -> list[str]:
    """This test process's benchmark databases (others on the server are not ours to judge)."""
    pattern = f"fairlane\\_bench\\_%\\_{os.getpid()}"
    rows = db.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (pattern,))
    return [row[0] for row in rows.fetchall()]


def assert_rate(result: dict[str, Any], count: int, rate_key: str, seconds_key: str) -> None:
    """The reported rate is the count over the reported time (both rounded by the benchmark),
    and that time is a real one: not a constant, not zero."""
    seconds = result[seconds_key]
    assert 0 < seconds < 600
    # The time is printed to the millisecond: that rounding alone moves the rate this much.
    rounding = 0.0006 / seconds
    assert result[rate_key] == pytest.approx(count / seconds, rel=0.01 + rounding, abs=1)
