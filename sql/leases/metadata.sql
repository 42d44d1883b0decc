-- Progress a handler reports (ctx.set_metadata), written by the worker's outcome writer in
-- batches, coalesced per run. Fenced like every statement of sql/leases: a patch lands only on
-- a run whose id AND lease_token match, while it is EXECUTING or WAITING, so a worker whose
-- lease lapsed and was re-claimed changes nothing. Runs are locked in descending id order (the
-- global lock order of docs/concurrency.md), found from the leases as in outcomes.sql; its
-- arrays go in binary, as there.

-- name: set_run_metadata
-- params: ids bigint[], tokens uuid[], patches text[]
-- Each patch (a JSON object) is merged into the run's metadata: its top-level keys replace the
-- run's, the others stay. Returns the ids the fence accepted.
WITH patched AS MATERIALIZED (
    SELECT run.id, lease.patch
    FROM (SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(patches)b::text[])
              AS lease(id, token, patch)
          ORDER BY lease.id DESC OFFSET 0) AS lease
    CROSS JOIN LATERAL (
        SELECT r.id, r.status FROM {schema}.runs AS r
        WHERE r.id = lease.id AND r.lease_token = lease.token
        OFFSET 0 FOR UPDATE) AS run
    WHERE run.status IN ('EXECUTING', 'WAITING')
)
UPDATE {schema}.runs AS r
SET metadata = r.metadata || patched.patch::jsonb
FROM patched
WHERE r.id = patched.id AND r.id = ANY(%(ids)b::bigint[])
RETURNING r.id;
