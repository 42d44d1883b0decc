"""The reads of every queued run of a queue or environment, over the two queued indexes.

A QUEUED run is in runs_queued_keyless_idx or in runs_queued_key_idx, never both (revision
0031), so each statement that wants all of them reads both. These properties compare each with
the same question asked of the runs table directly, over open-ended mixes of environments,
queues, keys, statuses and priorities: environments and queues with only keyed runs, only
keyless ones, both, or none queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
ENVIRONMENTS = ("a", "b", "c")
QUEUES = ("q1", "q2")
STATUSES = ("QUEUED", "QUEUED", "DELAYED", "EXECUTING", "COMPLETED")


@dataclass(frozen=True)
class Run:
    environment: str
    queue: str
    key: str | None
    status: str
    priority: int


runs_strategy = st.lists(
    st.builds(
        Run,
        st.sampled_from(ENVIRONMENTS),
        st.sampled_from(QUEUES),
        st.one_of(st.none(), st.sampled_from(("k1", "k2", "k3"))),
        st.sampled_from(STATUSES),
        st.integers(0, 3),
    ),
    max_size=40,
)

INSERT = """
INSERT INTO fairlane.runs (environment, queue, task, payload, status, priority, concurrency_key,
                           available_at, finished_at)
VALUES (%s, %s, 'noop', 'null', %s, %s, %s,
        CASE WHEN %s = 'DELAYED' THEN now() + interval '1 hour' END,
        CASE WHEN %s = 'COMPLETED' THEN now() END)
"""


def fill(db: psycopg.Connection[Any], runs: list[Run]) -> None:
    db.execute("INSERT INTO fairlane.environments (name) VALUES ('a'), ('b'), ('c')")
    db.execute(
        "INSERT INTO fairlane.queues (environment, name) "
        "SELECT e, q FROM unnest(%s::text[]) AS e, unnest(%s::text[]) AS q",
        (list(ENVIRONMENTS), list(QUEUES)),
    )
    with db.cursor() as cursor:
        cursor.executemany(
            INSERT,
            [
                (r.environment, r.queue, r.status, r.priority, r.key, r.status, r.status)
                for r in runs
            ],
        )


def column(db: psycopg.Connection[Any], sql: str, *params: Any) -> list[Any]:
    return [row[0] for row in db.execute(sql, params).fetchall()]


QUEUED_IN_ORDER = """
SELECT id, concurrency_key FROM fairlane.runs
WHERE environment = %s AND queue = %s AND status = 'QUEUED'
ORDER BY queue_order, id
"""


def expected_heads(db: psycopg.Connection[Any], environment: str, queue: str) -> list[int]:
    """Every keyless queued run and each key's first, in queue order."""
    heads: list[int] = []
    keys_seen: set[str] = set()
    for run_id, key in db.execute(QUEUED_IN_ORDER, (environment, queue)).fetchall():
        if key is None:
            heads.append(run_id)
        elif key not in keys_seen:
            keys_seen.add(key)
            heads.append(run_id)
    return heads


QUEUED_PLACES = "SELECT DISTINCT {} FROM fairlane.runs WHERE status = 'QUEUED' ORDER BY {}"
COUNT = "SELECT count(*) FROM fairlane.runs WHERE environment = %s AND status = ANY(%s)"


def check_loose_scans(db: psycopg.Connection[Any]) -> None:
    """environments_with_work and next_queued_queue step through what is queued."""
    found = column(db, "SELECT * FROM fairlane.environments_with_work()")
    assert found == column(db, QUEUED_PLACES.format("environment", "1"))
    walked: list[tuple[str, str]] = []
    after = ("", "")
    while step := db.execute(
        "SELECT environment, queue FROM fairlane.next_queued_queue(%s, %s)", after
    ).fetchone():
        walked.append(step)
        after = step
    assert walked == db.execute(QUEUED_PLACES.format("environment, queue", "1, 2")).fetchall()


def check_queue(db: psycopg.Connection[Any], environment: str, queue: str) -> None:
    """A queue's count, its head and its waiting runs."""
    in_queue = COUNT + " AND queue = %s"
    assert column(db, "SELECT fairlane.queued_run_count(%s, %s)", environment, queue) == column(
        db, in_queue, environment, ["QUEUED"], queue
    )
    heads = expected_heads(db, environment, queue)
    for how_many in (1, 3, 100):
        head = "SELECT id FROM fairlane.queue_head_runs(%s, %s, %s)"
        assert column(db, head, environment, queue, how_many) == heads[:how_many]
    waiting = column(db, in_queue, environment, ["QUEUED", "DELAYED"], queue)
    counted = "SELECT fairlane.waiting_runs(%s, %s, 1000)"
    assert column(db, counted, environment, queue) == waiting


@PROPERTY
@given(runs=runs_strategy)
def test_queued_reads_match_the_runs_table(db: psycopg.Connection[Any], runs: list[Run]) -> None:
    with db.transaction(force_rollback=True):
        fill(db, runs)
        check_loose_scans(db)
        for environment in ENVIRONMENTS:
            assert column(db, "SELECT fairlane.queued_run_count(%s)", environment) == column(
                db, COUNT, environment, ["QUEUED"]
            )
            for queue in QUEUES:
                check_queue(db, environment, queue)


@PROPERTY
@given(runs=runs_strategy)
def test_drained_environments_with_queued_runs_rejoin(
    db: psycopg.Connection[Any], runs: list[Run]
) -> None:
    """The looks for a queued run of an environment (mark_environments_active's, the
    sweeper's) find keyed runs as well as keyless ones."""
    with db.transaction(force_rollback=True):
        fill(db, runs)
        queued_environments = QUEUED_PLACES.format("environment", "1")
        expected = column(db, queued_environments)
        db.execute("UPDATE fairlane.environments SET drained = true")
        joined = column(
            db,
            "SELECT name FROM fairlane.mark_environments_active(%s) ORDER BY 1",
            list(ENVIRONMENTS),
        )
        assert joined == expected
        db.execute("UPDATE fairlane.environments SET drained = true")
        db.execute("SELECT fairlane.sweep_concurrency()")
        # The sweeper first queues again the EXECUTING runs without a lease (these all are).
        active = "SELECT name FROM fairlane.environments WHERE NOT drained ORDER BY 1"
        assert column(db, active) == column(db, queued_environments)
