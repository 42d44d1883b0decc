"""The one layer over fairlane's SQL.

An ``Engine`` (one per schema: ``engine(schema)``) has a section per part of ``sql/``, and each
section a method per named statement, returning a ``Statement`` typed by its rows. Nothing else
in fairlane reads ``sql/``. A statement runs on the caller's psycopg connection, sync or async:
``rows``/``first``/``one``/``run`` and their ``_async`` twins (fairlane.engine.statement).
"""

from __future__ import annotations

from functools import cache

from fairlane.engine.batches import Batches
from fairlane.engine.claim import Claim
from fairlane.engine.cron import Cron
from fairlane.engine.journal import Journal
from fairlane.engine.leases import Leases
from fairlane.engine.limits import Limits
from fairlane.engine.listen import Listen
from fairlane.engine.maintenance import Maintenance
from fairlane.engine.metrics import Metrics
from fairlane.engine.realtime import Realtime
from fairlane.engine.runs import Runs
from fairlane.engine.schema import SchemaState
from fairlane.engine.statement import (
    Statement,
    first,
    first_async,
    one,
    one_async,
    rows,
    rows_async,
    run,
    run_async,
)
from fairlane.engine.triggers import Triggers
from fairlane.engine.waits import Waits
from fairlane.engine.web import Web
from fairlane.engine.workers import Workers


class Engine:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.runs = Runs(schema)
        self.triggers = Triggers(schema)
        self.claim = Claim(schema)
        self.limits = Limits(schema)
        self.leases = Leases(schema)
        self.waits = Waits(schema)
        self.journal = Journal(schema)
        self.batches = Batches(schema)
        self.maintenance = Maintenance(schema)
        self.metrics = Metrics(schema)
        self.schema_state = SchemaState(schema)
        self.listen = Listen(schema)
        self.web = Web(schema)
        self.realtime = Realtime(schema)
        self.cron = Cron(schema)
        self.workers = Workers(schema)


@cache
def engine(schema: str) -> Engine:
    return Engine(schema)


__all__ = [
    "Engine",
    "Statement",
    "engine",
    "first",
    "first_async",
    "one",
    "one_async",
    "rows",
    "rows_async",
    "run",
    "run_async",
]
