"""The chaos suite's server: a throwaway cluster of its own (it is restarted, crashed and
frozen), one for the session, with a migrated template database holding the ledger table;
each scenario gets a database cloned from it."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane.schema import migrate
from tests.chaos.harness import Fleet
from tests.chaos.tasks import LEDGER_TABLE, STEPS_TABLE
from tests.helpers.cluster import Cluster, bindir

TEMPLATE = "chaos_template"
_databases = itertools.count()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    binaries = bindir()
    if binaries is None:
        pytest.skip("no local PostgreSQL server binaries (initdb, pg_ctl)")
    made = Cluster(binaries)
    try:
        made.init()
        made.start()
        with psycopg.connect(made.dsn(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {TEMPLATE}")
        migrate.upgrade(made.dsn(TEMPLATE))
        with psycopg.connect(made.dsn(TEMPLATE), autocommit=True) as conn:
            conn.execute(LEDGER_TABLE)
            conn.execute(STEPS_TABLE)
            # Lease reclaim, promotion and the rest every 0.2 s: a lapsed lease is found fast.
            conn.execute("UPDATE fairlane.periodic_jobs SET interval_s = 0.2")
        yield made
    finally:
        made.destroy()


@pytest.fixture
def chaos_dsn(cluster: Cluster) -> str:
    """A fresh database of the cluster, cloned from the template."""
    name = f"chaos_{next(_databases)}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    return cluster.dsn(name)


@pytest.fixture
def make_fleet(chaos_dsn: str, tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """Makes the scenario's fleet of worker processes; whatever is left of it is stopped."""
    made: list[Fleet] = []

    def make(**options: Any) -> Fleet:
        fleet = Fleet(chaos_dsn, tmp_path, **options)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.stop_all()
