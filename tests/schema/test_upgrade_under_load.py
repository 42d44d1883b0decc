"""An upgrade that indexes the runs table while a producer triggers and a worker process drains:
no trigger and no claim waits for the build.

The database holds many finished runs (enough that building an index takes visible time) and is
at this release's head; a revision that only this test runs (tests/helpers/revisions.py) builds
a new index on runs and replaces an existing one, through the concurrent helpers, as a release's
revision would. A producer thread triggers runs, a worker process (``fairlane worker``) drains
them, and a probe thread claims and completes runs through the claim statement, each timing its
statements, while ``migrate.upgrade`` runs to the new head. The control, a plain build holding
every trigger up, is tests/schema/test_concurrent_indexes.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane import trigger
from fairlane.engine import engine
from fairlane.engine.statement import rows
from fairlane.schema import migrate
from fairlane.schema.concurrent_index import index_state
from tests.helpers import poll
from tests.helpers.revisions import with_revision
from tests.schema.test_concurrent_indexes import runner

pytestmark = pytest.mark.slow

FINISHED_RUNS = 200_000
# What a trigger or a claim may wait during the upgrade (issue 40: "no trigger or claim waits
# longer than a second").
MOST = 1.0
REVISION = """
create_index_concurrently("runs_tags_idx", "runs", "USING gin (tags)")
replace_index_concurrently(
    "runs_parent_idx", "runs", "(parent_run_id, id) WHERE parent_run_id IS NOT NULL"
)
"""
TASKS = """
from fairlane import RunContext, TaskRegistry

tasks = TaskRegistry()


@tasks.task()
def noop(ctx: RunContext, payload: None) -> None:
    return None
"""

Timings = list[tuple[float, float]]  # (start, seconds) of each statement


def _fill(db: psycopg.Connection[Any]) -> None:
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status, finished_at,"
        " tags, parent_run_id)"
        " SELECT 'history', 'default', 'old', '{}', 'COMPLETED', now(),"
        " ARRAY['customer-' || (n %% 5000), 'day-' || (n %% 30)], nullif(n %% 3, 0) * n"
        " FROM generate_series(1, %s) AS n",
        (FINISHED_RUNS,),
    )
    db.execute("ANALYZE fairlane.runs")


class _Loop(threading.Thread):
    """Runs ``step`` on its own connection until stopped, timing each call."""

    def __init__(self, dsn: str, step: Callable[[psycopg.Connection[Any]], object]) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.step = step
        self.timings: Timings = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stopping.is_set():
                    started = time.monotonic()
                    self.step(conn)
                    self.timings.append((started, time.monotonic() - started))
        except BaseException as error:  # reported by the test
            self.error = error


def _produce(conn: psycopg.Connection[Any]) -> None:
    trigger(conn, "noop", environment="acme")


def _claim_and_complete(conn: psycopg.Connection[Any]) -> None:
    statements = engine("fairlane")
    claimed = [
        run
        for run, _ in rows(
            conn,
            statements.claim.runs(
                1, lease_s=30, worker_id="probe", environments=None, queues=None, full_scan=True
            ),
        )
    ]
    if claimed:
        ids = [run.id for run in claimed]
        tokens = [run.lease_token for run in claimed]
        rows(conn, statements.leases.complete(ids, tokens, ["null"] * len(ids)))


@contextmanager
def _worker(dsn: str, folder: Path) -> Iterator[subprocess.Popen[str]]:
    (folder / "upgrade_tasks.py").write_text(textwrap.dedent(TASKS))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "fairlane.cli", "worker", "upgrade_tasks:tasks"]
    command += ["--dsn", dsn, "--poll-interval", "0.1"]
    # Its log goes to a file: a pipe nobody reads until the end fills up with the worker's
    # line per run, and the worker then blocks on its next log line, holding its runs.
    log = folder / "worker.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=60)
        assert process.returncode == 0, log.read_text()[-4000:]


def _completed(db: psycopg.Connection[Any]) -> int:
    """The runs the worker process completed (the probe's have its worker id)."""
    row = db.execute(
        "SELECT count(*) FROM fairlane.runs"
        " WHERE environment = 'acme' AND status = 'COMPLETED' AND worker_id <> 'probe'"
    ).fetchone()
    return int(row[0]) if row else 0


def _during(timings: Timings, start: float, end: float) -> list[float]:
    return [seconds for begun, seconds in timings if begun < end and begun + seconds > start]


def test_an_upgrade_that_indexes_runs_holds_up_no_trigger_and_no_claim(
    empty_database: Any, tmp_path: Path
) -> None:
    dsn = empty_database()
    migrate.upgrade(dsn)
    migrations, head = with_revision(tmp_path, REVISION)
    with psycopg.connect(dsn, autocommit=True) as db:
        _fill(db)
        producer, prober = _Loop(dsn, _produce), _Loop(dsn, _claim_and_complete)
        with _worker(dsn, tmp_path):
            producer.start()
            prober.start()
            poll(lambda: _completed(db) >= 50, within=60, what="the worker draining")

            started = time.monotonic()
            installed = migrate.upgrade(dsn, migrations=migrations)
            ended = time.monotonic()

            drained_before = _completed(db)
            poll(lambda: _completed(db) > drained_before + 50, within=60, what="still draining")
            producer.stopping.set()
            prober.stopping.set()
            producer.join()
            prober.join()
        assert producer.error is None, producer.error
        assert prober.error is None, prober.error

        assert migrate.current_revision(dsn) == head
        assert installed is not None
        assert not installed.changed
        run = runner(db)
        assert index_state(run, "fairlane", "runs_tags_idx") is True
        assert index_state(run, "fairlane", "runs_parent_idx") is True
        assert index_state(run, "fairlane", "runs_parent_idx_next") is None
        triggers = _during(producer.timings, started, ended)
        claims = _during(prober.timings, started, ended)
        plain = _plain_build_seconds(db)
    print(
        f"\nupgrade under load: {ended - started:.2f} s over {FINISHED_RUNS} finished runs;"
        f" {len(triggers)} triggers during it (longest {max(triggers):.3f} s),"
        f" {len(claims)} claims (longest {max(claims):.3f} s); the same index built plainly"
        f" (every write to runs held up meanwhile): {plain:.2f} s"
    )
    assert triggers
    assert claims
    assert max(triggers) < MOST, sorted(triggers)[-5:]
    assert max(claims) < MOST, sorted(claims)[-5:]


def _plain_build_seconds(db: psycopg.Connection[Any]) -> float:
    """How long a plain build of the new index takes (rolled back): how long every trigger and
    claim would have waited had the revision built it plainly."""
    with db.transaction(force_rollback=True):
        started = time.monotonic()
        db.execute("CREATE INDEX runs_tags_plain_idx ON fairlane.runs USING gin (tags)")
        return time.monotonic() - started
