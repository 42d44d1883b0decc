-- Progress a handler reports (ctx.set_metadata), written by the worker's outcome writer in
-- batches, coalesced per run. Fenced like every statement of sql/leases: a patch lands only on
-- a run whose id AND lease_token match, while it is EXECUTING or WAITING, so a worker whose
-- lease lapsed and was re-claimed changes nothing. Runs are locked in descending id order (the
-- global lock order of docs/concurrency.md). Its arrays go in binary, as in outcomes.sql.

-- name: set_run_metadata
-- Each patch (a JSON object) is merged into the run's metadata: its top-level keys replace the
-- run's, the others stay. Returns the ids the fence accepted.
UPDATE {schema}.runs AS r
SET metadata = r.metadata || patched.patch::jsonb
FROM (SELECT r.id, lease.patch
      FROM {schema}.runs AS r
      JOIN unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(patches)b::text[])
           AS lease(id, token, patch)
        ON r.id = lease.id AND r.lease_token = lease.token
      WHERE r.status IN ('EXECUTING', 'WAITING')
      ORDER BY r.id DESC
      FOR UPDATE OF r) AS patched
WHERE r.id = patched.id
RETURNING r.id;
