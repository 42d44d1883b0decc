"""The repository layout holds: ``queue/`` shadows nothing, and the wheel carries its data.

The wheel test builds the project with pip (hatchling, isolated build), installs the wheel into
a throwaway venv and checks, from outside the source tree, that the named SQL and the alembic
scripts are read from the installed package and that the packaged migrations run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane.schema import migrate

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "queue" / "fairlane"

# The build and the install each have this limit; in practice the whole wheel test takes
# well under ten seconds (pip's cache serves the build backend and the dependencies).
STEP_TIMEOUT = 40.0


def _clean_env() -> dict[str, str]:
    """The environment without anything that would put the source tree on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.pop("FAIRLANE_SCHEMA", None)
    return env


def _run(*args: str | Path, cwd: Path | None = None, timeout: float = 30.0) -> str:
    """Run a command to completion (within ``timeout``); fail the test with its output if not."""
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_queue_folder_does_not_shadow_the_standard_library() -> None:
    assert not (ROOT / "queue" / "__init__.py").exists()
    probe = textwrap.dedent(
        """
        import queue, sys
        queue.Queue
        print(queue.__file__)
        import concurrent.futures, sqlalchemy  # both import the standard library's queue
        """
    )
    location = Path(_run(sys.executable, "-c", probe, cwd=ROOT).strip())
    assert not location.is_relative_to(ROOT), f"queue was imported from {location}"
    assert location.name == "queue.py"


def test_package_is_typed() -> None:
    assert (PACKAGE / "py.typed").is_file()


@pytest.mark.slow
def test_installed_wheel_reads_its_own_sql_and_migrations(
    tmp_path: Path, dsn: str, db: psycopg.Connection[Any]
) -> None:
    pip = (sys.executable, "-m", "pip")
    _run(*pip, "wheel", "--no-deps", "--quiet", "-w", tmp_path / "dist", ROOT, timeout=STEP_TIMEOUT)
    (wheel,) = (tmp_path / "dist").glob("fairlane-*.whl")

    # A venv of the interpreter that runs the tests, with no pip of its own (fast): this
    # environment's pip installs the wheel and its dependencies (from the index or pip's cache).
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(*pip, "--python", python, "install", "--quiet", wheel, timeout=STEP_TIMEOUT)

    probe = textwrap.dedent(
        """
        import sys, sysconfig
        from pathlib import Path
        import fairlane, fairlane.engine.sqlfiles
        import fairlane.schema.migrate, fairlane.schema.revision_hashes

        site = Path(sysconfig.get_paths()["purelib"]).resolve()
        package = Path(fairlane.__file__).resolve().parent
        sql_dir = Path(str(fairlane.engine.sqlfiles.sql_dir())).resolve()
        migrations = fairlane.schema.revision_hashes.migrations_dir().resolve()
        assert package == site / "fairlane", package
        assert sql_dir == package / "_sql", sql_dir
        assert migrations == package / "_migrations", migrations
        assert (migrations / "env.py").is_file()
        claim_file = sql_dir / "claim" / "claim.sql"
        packaged = fairlane.engine.sqlfiles.parse_named_statements(claim_file.read_text())
        claim = fairlane.engine.sqlfiles.query("claim_runs", "fairlane")
        assert fairlane.engine.sqlfiles._raw_statements()["claim_runs"] == packaged["claim_runs"]
        assert '"fairlane"' in claim and "{schema}" not in claim, claim
        # The packaged migrations run: a schema of its own in the test database.
        fairlane.schema.migrate.upgrade(sys.argv[1], schema="from_wheel")
        print(fairlane.schema.migrate.current_revision(sys.argv[1], schema="from_wheel"))
        """
    )
    # Run from outside the source tree, so only the installed wheel can be imported.
    revision = _run(python, "-c", probe, dsn, cwd=tmp_path).strip()
    assert revision == migrate.head_revision()
    assert db.execute("SELECT count(*) FROM from_wheel.runs").fetchone() == (0,)


def test_statements_are_sent_without_their_comment_lines() -> None:
    from fairlane.engine.sqlfiles import parse_named_statements, query

    source = textwrap.dedent(
        """\
        -- name: plain
        -- what it does
        SELECT 1  -- a trailing comment stays
        -- between clauses
        FROM t;

        -- name: create_function
        -- outside the body
        CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$
        BEGIN
            -- inside the body, kept for \\sf
            RETURN 1;
        END;
        $$;
        """
    )
    statements = parse_named_statements(source)
    assert statements["plain"] == "SELECT 1  -- a trailing comment stays\nFROM t;"
    assert "outside the body" not in statements["create_function"]
    assert "-- inside the body, kept for \\sf" in statements["create_function"]
    # psycopg caches its conversion of statements up to 4 KiB: the trigger's must stay under.
    assert len(query("insert_runs", "fairlane").encode()) <= 4096
