"""The PostgreSQL versions fairlane supports: a server older than the oldest is refused at
`migrate` and at worker start in one line naming the version needed, and an SQL error met
while migrating is reported as what it is, never as a malformed URL.

The refusal is tried against a real server of the last unsupported major version, whose
binaries `.ci/run` unpacks from the npm registry (`.ci/postgres`) and names in
FAIRLANE_UNSUPPORTED_POSTGRES_BIN; without it the test skips locally and fails under CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane.cli import main
from fairlane.cli.common import EXIT_USAGE as EXIT_REFUSED
from fairlane.connection import connect_failure
from fairlane.errors import UnsupportedServerError
from fairlane.schema.check import OLDEST_SERVER, SCHEMA_REVISION, require_supported_server
from tests.faults.test_startup import TASKS, one_error_line, with_database
from tests.helpers.cluster import Cluster

UNSUPPORTED_BIN = "FAIRLANE_UNSUPPORTED_POSTGRES_BIN"


@pytest.mark.parametrize(
    ("number", "shown"), [(120022, "12.22"), (90624, "9.6.24"), (100000, "10.0")]
)
def test_an_older_server_is_refused_naming_both_versions(number: int, shown: str) -> None:
    with pytest.raises(UnsupportedServerError) as refused:
        require_supported_server(number)
    assert str(refused.value) == (
        f"PostgreSQL {shown} is not supported: fairlane needs PostgreSQL 13 or newer"
    )


@pytest.mark.parametrize("number", [OLDEST_SERVER, 130023, 150010, 180004])
def test_supported_servers_pass(number: int) -> None:
    require_supported_server(number)


def test_an_sql_error_is_not_a_malformed_url(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.SyntaxError) as failed:
        db.execute("CREATE OR REPLACE TRIGGGER x")
    assert connect_failure(failed.value, SCHEMA_REVISION) is None


@pytest.fixture
def unsupported_server() -> Iterator[Cluster]:
    binaries = os.environ.get(UNSUPPORTED_BIN)
    if not binaries:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{UNSUPPORTED_BIN} is not set: .ci/run unpacks an unsupported server")
        pytest.skip(f"{UNSUPPORTED_BIN} names no unsupported PostgreSQL's binaries")
    cluster = Cluster(Path(binaries))
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


def test_migrate_and_worker_refuse_an_unsupported_server(
    unsupported_server: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = with_database(unsupported_server.dsn(), "fairlane_old")
    status = main(["migrate", "--dsn", dsn])
    line = one_error_line(capsys)
    assert status == EXIT_REFUSED
    assert line.startswith("error: PostgreSQL 12."), line
    assert line.endswith("is not supported: fairlane needs PostgreSQL 13 or newer"), line
    # Nothing was made: the refusal comes before the first revision.
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'fairlane'")
        assert found.fetchone() == (0,)

    status = main(["worker", TASKS, "--dsn", dsn])
    line = one_error_line(capsys)
    assert status == EXIT_REFUSED
    assert "fairlane needs PostgreSQL 13 or newer" in line, line
