"""The README's Quickstart runs as written, in a fresh project folder outside the repository:
its task module, `fairlane migrate`, its two trigger snippets and `fairlane worker`, against a
real database, until every run it triggered has COMPLETED."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.helpers import statuses, wait_until

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```(python|sh)\n(.*?)```", re.S)

pytestmark = pytest.mark.anyio


def quickstart_blocks() -> list[tuple[str, str]]:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Quickstart")
    section = readme[start : readme.index("\n## ", start + 1)]
    return BLOCK.findall(section)


def url(dsn: str) -> str:
    parts = conninfo_to_dict(dsn)
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


async def test_the_quickstart_runs_as_written(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": url(dsn),
        "PATH": f"{Path(sys.executable).parent}:" + os.environ.get("PATH", ""),
    }
    env.pop("PYTHONPATH", None)
    blocks = quickstart_blocks()
    assert [kind for kind, _ in blocks] == ["python", "sh", "python", "python", "sh"]
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(blocks[0][1])

    def run(command: list[str]) -> str:
        done = subprocess.run(
            command,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        return done.stdout

    def shell_line(block: str) -> list[str]:
        (line,) = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
        return shlex.split(line)

    run(shell_line(blocks[1][1]))
    for number, (_, code) in enumerate(blocks[2:4]):
        (tmp_path / f"step_{number}.py").write_text(code)
        out = run([sys.executable, f"step_{number}.py"])
    assert out.split() == ["QUEUED", "1000"]
    assert statuses(db) == {"QUEUED": 1002}

    # Started and left to run in its own process: nothing here blocks on it but the end.
    # Its log (a line per run) goes to a file: a pipe nobody reads would fill and stop it.
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(  # noqa: ASYNC220
        shell_line(blocks[4][1]), cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        await wait_until(
            lambda: statuses(db) == {"COMPLETED": 1002} or worker.poll() is not None,
            within=60,
            what=f"drain (now {statuses(db)})",
        )
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        log.close()
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()
    assert "completed: resize_image in acme/images" in (tmp_path / "worker.log").read_text()
