"""Three `fairlane worker` processes and an every-second cron schedule for about ten seconds:
one run per tick, no tick twice, and no tick skipped while a worker was up.

The workers come and go while the schedule ticks: the first starts alone (it declares the
schedule), two more join, the first is killed (SIGKILL, possibly in the middle of a firing
transaction), the second stops gracefully, and the third runs to the end. Whoever fires a tick,
every tick from the first after the schedule was declared to the last before the last worker
stopped has exactly one ``schedule_fires`` row and exactly one run. Run with `make stress`
(CI runs it)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.helpers import poll

pytestmark = [pytest.mark.stress, pytest.mark.timeout(300)]

TASKS = """
from fairlane import RunContext, TaskRegistry

tasks = TaskRegistry()


@tasks.task(cron="* * * * * *", queue="beat")
async def beat(ctx: RunContext, payload: None) -> str:
    return str(ctx.metadata["tick"])
"""
KEY = "task:beat"
SECOND = timedelta(seconds=1)


class Beat:
    """The database side: workers up, ticks fired, runs made."""

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self.db = db

    def periodic_loops(self) -> int:
        """Workers whose periodic loop (which fires schedules) is connected."""
        row = self.db.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'fairlane periodic'"
        ).fetchone()
        return int(row[0]) if row else 0

    def fired(self) -> list[datetime]:
        rows = self.db.execute(
            "SELECT f.tick FROM fairlane.schedule_fires f JOIN fairlane.schedules s "
            "ON s.id = f.schedule_id WHERE s.key = %s ORDER BY f.tick",
            (KEY,),
        ).fetchall()
        return [tick for (tick,) in rows]

    def wait_ticks(self, more: int) -> None:
        """Until ``more`` ticks fired after the ones fired now."""
        target = len(self.fired()) + more
        poll(lambda: len(self.fired()) >= target, within=30, what=f"{more} more ticks")

    def now_second(self) -> datetime:
        row = self.db.execute("SELECT date_trunc('second', clock_timestamp())").fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]


class Workers:
    """`fairlane worker` processes, their output in files (a line per run would fill a pipe)."""

    def __init__(self, dsn: str, folder: Path) -> None:
        self.dsn = dsn
        self.folder = folder
        source = Path(__file__).resolve().parents[2] / "queue"
        self.env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{source}"}
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        n = len(self.started)
        with (
            open(self.folder / f"worker{n}.out", "wb") as out,
            open(self.folder / f"worker{n}.log", "wb") as log,
        ):
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fairlane.cli",
                    "worker",
                    "cron_tasks:tasks",
                    "--dsn",
                    self.dsn,
                    "--poll-interval",
                    "0.2",
                    "--lease-seconds",
                    "5",
                    "--shutdown-grace",
                    "5",
                    "--json",
                ],
                env=self.env,
                cwd=self.folder,
                stdout=out,
                stderr=log,
            )
        self.started.append(process)
        return process

    def stats(self, n: int) -> dict[str, Any]:
        """The counters a worker that stopped gracefully printed."""
        result: dict[str, Any] = json.loads((self.folder / f"worker{n}.out").read_text())
        return result

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Workers]:
    (tmp_path / "cron_tasks.py").write_text(textwrap.dedent(TASKS))
    started = Workers(dsn, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def test_three_worker_processes_fire_an_every_second_schedule_once_per_tick(
    db: psycopg.Connection[Any], workers: Workers
) -> None:
    beat = Beat(db)
    launched = beat.now_second()
    first = workers.start()
    poll(lambda: beat.periodic_loops() == 1, within=30, what="the first worker up")
    beat.wait_ticks(2)  # alone

    second, third = workers.start(), workers.start()
    poll(lambda: beat.periodic_loops() == 3, within=30, what="three workers up")
    beat.wait_ticks(3)

    first.send_signal(signal.SIGKILL)  # a crash, perhaps mid-firing
    first.wait(timeout=30)
    poll(lambda: beat.periodic_loops() == 2, within=30, what="the killed worker's connections gone")
    beat.wait_ticks(3)

    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
    beat.wait_ticks(2)  # the third alone

    last_before_stop = beat.now_second()
    poll(lambda: last_before_stop in beat.fired(), within=30, what="the tick of the stop's second")
    third.send_signal(signal.SIGTERM)
    assert third.wait(timeout=60) == 0

    ticks = beat.fired()
    row = db.execute("SELECT created_at FROM fairlane.schedules WHERE key = %s", (KEY,))
    (declared_at,) = row.fetchone() or (None,)
    assert declared_at is not None
    # From the first tick after the first worker was up (it declared the schedule) ...
    first_after_declared = declared_at.replace(microsecond=0) + SECOND
    assert launched < ticks[0] <= first_after_declared, (ticks[0], declared_at)
    # ... to the last before the last worker stopped, with no tick missing in between,
    assert ticks[-1] >= last_before_stop
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    assert set(gaps) == {SECOND}, [t.isoformat() for t in ticks]
    # and one run per tick, never two.
    runs = db.execute(
        "SELECT (metadata ->> 'tick')::timestamptz AS tick, count(*) FROM fairlane.runs "
        "WHERE metadata ->> 'schedule' = %s GROUP BY 1 ORDER BY 1",
        (KEY,),
    ).fetchall()
    assert [tick for tick, _ in runs] == ticks
    assert {count for _, count in runs} == {1}
    fires = db.execute(
        "SELECT count(*), count(DISTINCT f.run_id) FROM fairlane.schedule_fires f "
        "JOIN fairlane.runs r ON r.id = f.run_id WHERE r.metadata ->> 'schedule' = %s",
        (KEY,),
    ).fetchone()
    assert fires == (len(ticks), len(ticks)), "every fire names its own run"

    # The first worker fired the ticks it was alone for; the survivors report the rest.
    survivors = workers.stats(1)["scheduled_runs"] + workers.stats(2)["scheduled_runs"]
    assert workers.stats(2)["scheduled_runs"] > 0
    assert len(ticks) - survivors >= 2
    print(
        f"\n{len(ticks)} ticks over {(ticks[-1] - ticks[0]).total_seconds():.0f} s, "
        f"3 workers (one killed): each fired once, none skipped; the survivors fired "
        f"{survivors}"
    )
