"""Many environments in the states a multi-tenant deployment shows, written set-based.

Environment i (``e00000``, ...) has a ``default`` queue and two runs that finished a moment
ago; every tenth (i mod 10 = 0) is active: three runs QUEUED and one EXECUTING under a live
lease, its drained mark off; every twentieth, and every twentieth but five (i mod 20 in 0, 5),
also holds a run DELAYED for an hour; every fiftieth but seven a FAILED one. The rest are
drained: the long tail of tenants with nothing to do. Environment 0 has every state, so one
environment is the same picture at its smallest.

Three INSERTs in one transaction, whatever the number of environments (10,000 take a second
or two, not the minutes one call per environment would), then ANALYZE, as autovacuum would
have run by the time a deployment holds that many.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from fairlane.tools.bench.common import SCHEMA

TASK = "bench.periodic"
ACTIVE_EVERY = 10

_ENVIRONMENTS = """
INSERT INTO {schema}.environments (name, drained)
SELECT 'e' || lpad(i::text, 5, '0'), mod(i, {active}) <> 0
FROM generate_series(0, %(n)s - 1) AS i
"""

_QUEUES = """
INSERT INTO {schema}.queues (environment, name)
SELECT name, 'default' FROM {schema}.environments
"""

# (status, how many, which environments): one INSERT over all of them.
_RUNS = """
INSERT INTO {schema}.runs (environment, queue, task, payload, status, attempts, available_at,
                           started_at, finished_at, lease_token, lease_until, worker_id, result,
                           error)
SELECT 'e' || lpad(i::text, 5, '0'), 'default', %(task)s, '{{}}'::jsonb, kind.status,
       CASE WHEN kind.status IN ('QUEUED', 'DELAYED') THEN 0 ELSE 1 END,
       CASE kind.status WHEN 'DELAYED' THEN now() + interval '1 hour' END,
       CASE WHEN kind.status IN ('QUEUED', 'DELAYED') THEN NULL ELSE now() END,
       CASE WHEN kind.status IN ('COMPLETED', 'FAILED') THEN now() END,
       CASE kind.status WHEN 'EXECUTING' THEN gen_random_uuid() END,
       CASE kind.status WHEN 'EXECUTING' THEN now() + interval '10 minutes' END,
       CASE kind.status WHEN 'EXECUTING' THEN 'bench-worker' END,
       CASE kind.status WHEN 'COMPLETED' THEN 'null'::jsonb END,
       CASE kind.status WHEN 'FAILED' THEN '{{"type": "Bench"}}'::jsonb END
FROM generate_series(0, %(n)s - 1) AS i
CROSS JOIN LATERAL (VALUES ('COMPLETED', 2, true),
                           ('QUEUED', 3, mod(i, {active}) = 0),
                           ('EXECUTING', 1, mod(i, {active}) = 0),
                           ('DELAYED', 1, mod(i, 20) IN (0, 5)),
                           ('FAILED', 1, mod(i, 50) = 7)) AS kind(status, copies, here)
CROSS JOIN LATERAL generate_series(1, kind.copies) AS copy
WHERE kind.here
"""


def _statement(text: str) -> sql.Composed:
    return sql.SQL(text).format(schema=sql.Identifier(SCHEMA), active=sql.Literal(ACTIVE_EVERY))


def create(conn: psycopg.Connection[Any], environments: int) -> dict[str, int]:
    """Writes the environments, their queues and runs; returns the runs by status."""
    with conn.transaction():
        conn.execute(_statement(_ENVIRONMENTS), {"n": environments})
        conn.execute(_statement(_QUEUES))
        conn.execute(_statement(_RUNS), {"n": environments, "task": TASK})
    for table in ("environments", "queues", "runs"):
        conn.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(table)))
    by_status = conn.execute(
        sql.SQL("SELECT status, count(*) FROM {}.runs GROUP BY status ORDER BY status").format(
            sql.Identifier(SCHEMA)
        )
    ).fetchall()
    return {str(status): int(count) for status, count in by_status}
