"""Every Python block of the README runs as written, against a real database.

The README's blocks build on each other and on prose ("the Quickstart's module", "dsn: a
postgresql:// URL"). ``PREREQUISITES`` names, for each block, what a reader brings: the blocks
it builds on (run first, in the same namespace), the names the prose leaves to the reader
(``given``), whether a worker serving the Quickstart's tasks runs meanwhile, and what the block
promises, checked after it (``then``). The Quickstart's task module is written to
``app/tasks.py`` of a project folder; the Testing blocks are that project's conftest and test
file, run by pytest. A block added to the README without an entry here fails the suite.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.docs.readme_prerequisites import (
    MIGRATE_BLOCK,
    PREREQUISITES,
    TASKS_MODULE,
    TESTING_BLOCKS,
)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


@dataclass(frozen=True)
class Block:
    section: str  # the heading above it
    ordinal: int  # its place among the section's Python blocks, from 1
    line: int  # where its code starts in the README
    code: str

    @property
    def key(self) -> str:
        return f"{self.section} #{self.ordinal}"


def readme_blocks() -> list[Block]:
    blocks: list[Block] = []
    section, ordinal, start = "", 0, 0
    code: list[str] | None = None
    for number, line in enumerate(README.read_text().splitlines(), 1):
        heading = re.match(r"#{2,3} (.+)", line)
        if code is None and heading:
            section, ordinal = heading.group(1).strip(), 0
        elif code is None and line.strip() == "```python":
            code, start = [], number + 1
        elif code is not None and line.strip() == "```":
            ordinal += 1
            blocks.append(Block(section, ordinal, start, "\n".join(code) + "\n"))
            code = None
        elif code is not None:
            code.append(line)
    return blocks


BLOCKS = {block.key: block for block in readme_blocks()}
RUN_HERE = [key for key in BLOCKS if key not in {*TESTING_BLOCKS, TASKS_MODULE, MIGRATE_BLOCK}]


def test_every_block_has_its_prerequisites_named() -> None:
    assert set(BLOCKS) == set(PREREQUISITES), "a README block without an entry, or a stale one"


def as_url(dsn: str) -> str:
    """The test's database as the postgresql:// URL the README's readers are told to give."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    user = quote(str(params.get("user") or ""))
    password = f":{quote(str(params['password']))}" if params.get("password") else ""
    at = f"{user}{password}@" if user else ""
    host = params.get("host") or "127.0.0.1"
    return f"postgresql://{at}{host}:{params.get('port') or 5432}/{quote(str(params['dbname']))}"


@pytest.fixture
def url(dsn: str) -> str:
    return as_url(dsn)


@pytest.fixture
def project(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project folder holding the Quickstart's app/tasks.py, importable, with DATABASE_URL
    naming the test's database (what ``Client()`` reads)."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(BLOCKS[TASKS_MODULE].code)
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget_app_modules()
    yield tmp_path
    _forget_app_modules()  # the next test's project has an app of its own


def _forget_app_modules() -> None:
    for name in [name for name in sys.modules if name == "app" or name.startswith("app.")]:
        del sys.modules[name]


def _environment(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTEST_ADDOPTS", "FAIRLANE_SCHEMA"}}
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(ROOT / "queue"), str(ROOT)])
    return env


@pytest.fixture
def worker(project: Path, dsn: str) -> Iterator[None]:
    """A worker process serving the Quickstart's tasks, as `fairlane worker app.tasks:tasks`."""
    process = subprocess.Popen(
        [sys.executable, "-m", "fairlane.cli", "worker", "app.tasks:tasks", "--dsn", dsn],
        cwd=project,
        env=_environment(project),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _run(key: str, namespace: dict[str, Any]) -> None:
    block = BLOCKS[key]
    exec(compile(block.code, f"README.md:{block.line} ({key})", "exec"), namespace)


@pytest.mark.parametrize("key", RUN_HERE)
def test_the_block_runs(key: str, project: Path, url: str, request: pytest.FixtureRequest) -> None:
    needed = PREREQUISITES[key]
    if needed.worker:
        request.getfixturevalue("worker")
    namespace: dict[str, Any] = {"__name__": "__main__", "dsn": url}
    for earlier in needed.needs:
        exec(PREREQUISITES[earlier].given, namespace)
        _run(earlier, namespace)
    exec(needed.given, namespace)
    _run(key, namespace)
    exec(needed.then, namespace)


def test_the_quickstart_module_is_a_task_registry(project: Path) -> None:
    from app.tasks import tasks  # type: ignore[import-not-found]

    assert set(tasks.names()) >= {"resize_image", "send_receipt"}


def test_the_testing_blocks_run_under_pytest(project: Path, dsn: str) -> None:
    """The conftest and the test file of the Testing section, in the project beside the
    Quickstart's module: both tests pass (one drains a worker on a database of the plugin's,
    one runs eagerly with no database)."""
    conftest, test_file = (BLOCKS[key].code for key in TESTING_BLOCKS)
    (project / "conftest.py").write_text(conftest)
    (project / "test_images.py").write_text(test_file)
    server = psycopg.conninfo.conninfo_to_dict(dsn)
    server_url = make_conninfo(dsn, dbname="postgres")
    assert server["dbname"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=project,
        env={**_environment(project), "TEST_DATABASE_URL": server_url},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b2 passed\b", done.stdout), done.stdout


def test_the_migrate_block_creates_a_database(dsn: str) -> None:
    """The block under "Living beside your application's alembic" is given a database that
    does not exist yet; it creates it."""
    created = f"{psycopg.conninfo.conninfo_to_dict(dsn)['dbname']}_readme"
    url = as_url(make_conninfo(dsn, dbname=created))
    namespace: dict[str, Any] = {"dsn": url}
    try:
        _run(MIGRATE_BLOCK, namespace)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'jobs'").fetchone() == (
                1,
            )
    finally:
        with psycopg.connect(make_conninfo(dsn, dbname="postgres"), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(created))
            )
