"""Every named statement of sql/ is PREPAREd against a migrated database, and every one is
built by some method of the engine (fairlane/engine/): a statement nothing uses fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

import fairlane.engine
from fairlane.engine.sqlfiles import query, statement_names

# ``%(name)s``, and ``%(name)b`` for a parameter sent in binary.
_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]")
_BUILT = re.compile(r'_statement\(\s*"(\w+)"')
# Utility commands cannot be PREPAREd; these are run instead (each is harmless on a fresh
# database: LISTEN, and the periodic-job runner with nothing due that matters).
_RUN_INSTEAD = {
    "listen_channel", "listen_cancel_channel", "listen_resume_channel", "listen_finished_channel",
}  # fmt: skip
_PROCEDURE_CALLS = {"run_due_periodic_jobs"}


def _engine_sources() -> str:
    folder = Path(fairlane.engine.__file__).parent
    return "\n".join(path.read_text() for path in sorted(folder.glob("*.py")))


def _numbered(sql: str) -> str:
    """``%(name)s`` and ``%(name)b`` placeholders as ``$n``, the same name the same number."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    return _PLACEHOLDER.sub(number, sql).replace("%%", "%")


def test_every_statement_is_built_by_the_engine() -> None:
    built = set(_BUILT.findall(_engine_sources()))
    named = set(statement_names())
    assert named - built == set(), "named statements of sql/ that no engine method builds"
    assert built - named == set(), "engine methods naming statements sql/ does not have"


def test_nothing_outside_the_engine_reads_sql_files() -> None:
    package = Path(fairlane.engine.__file__).parent.parent
    readers = [
        str(path.relative_to(package)) for path in package.rglob("*.py")
        if "sqlfiles" in path.read_text() and path.parent.name != "engine"
    ]  # fmt: skip
    assert readers == []


@pytest.mark.parametrize("name", statement_names())
def test_statement_prepares_on_a_migrated_database(name: str, db: psycopg.Connection[Any]) -> None:
    sql = query(name, "fairlane")
    if name in _RUN_INSTEAD:
        db.execute(sql)
        return
    if name in _PROCEDURE_CALLS:
        db.autocommit = True
        db.execute(sql)
        return
    db.execute(f"PREPARE probe AS {_numbered(sql).rstrip().rstrip(';')}")
    row = db.execute("SELECT count(*) FROM pg_prepared_statements WHERE name = 'probe'").fetchone()
    assert row == (1,)
