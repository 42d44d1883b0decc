"""A trigger into many size-limited queues of one environment does work in proportion to its
queues, not to their square. Each limit meets the runs added under it by grouping
(check_queue_sizes, record_size_bounds, first_past_size_limit in sql/triggering/sizes.sql);
joined, every limit was compared with every queue of the call, and a call into 1,000 such
queues took a fifth of a second more (bench/sittings/53).

Shown on the plans, not the clock: auto_explain with ANALYZE reports every node's rows and
loops, and no node of any statement of the call may read or discard more than a few rows per
queue.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest
from fairlane.triggering.api import trigger_many_async
from tests.helpers import log_nested_plans

pytestmark = pytest.mark.anyio

QUEUES = 300
# PostgreSQL 18 prints rows with two decimals (an average over loops).
NODE = re.compile(r"\(actual rows=([\d.]+) loops=(\d+)\)")
REMOVED = re.compile(r"Rows Removed by (?:Join )?Filter: ([\d.]+)")


def most_rows_of_a_node(plan: str) -> float:
    """The most rows one node of ``plan`` returned or discarded, over all its loops."""
    most, loops = 0.0, 1
    for line in plan.splitlines():
        node = NODE.search(line)
        if node is not None:
            loops = int(node.group(2))
            most = max(most, float(node.group(1)) * loops)
            continue
        removed = REMOVED.search(line)
        if removed is not None:
            most = max(most, float(removed.group(1)) * loops)
    return most


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
async def test_a_call_into_many_limited_queues_grows_with_its_queues(
    dsn: str, db: psycopg.Connection[Any], keyed: bool
) -> None:
    db.execute("INSERT INTO fairlane.environments (name, size_limit) VALUES ('default', 1000000)")
    db.execute(
        "INSERT INTO fairlane.queues (environment, name, size_limit)"
        " SELECT 'default', 'q' || i, 1000000 FROM generate_series(1, %s) AS i",
        (QUEUES,),
    )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        await conn.execute("SET auto_explain.log_analyze = on")
        await conn.execute("SET auto_explain.log_timing = off")
        # Counted first, then within the bounds the first call kept.
        for call in range(2):
            await trigger_many_async(
                conn,
                [
                    TriggerRequest(
                        "t",
                        queue=f"q{i}",
                        idempotency_key=f"{call}-{i}" if keyed else None,
                    )
                    for i in range(1, QUEUES + 1)
                ],
            )
    analyzed = [plan for plan in plans if NODE.search(plan)]
    assert any("size_bounds" in plan for plan in analyzed)
    worst = max(analyzed, key=most_rows_of_a_node)
    assert most_rows_of_a_node(worst) <= 4 * QUEUES, worst
