-- Reading batches.

-- name: get_batch
-- params: id bigint
-- The batch's own counts are of items (made into runs, or failed to); run_outcomes says how
-- the runs they made are doing.
SELECT b.id, b.environment, b.run_count, b.status, b.sealed, b.succeeded, b.failed,
       b.parent_run_id, b.waitpoint_id, b.idempotency_key, b.created_at, b.sealed_at,
       b.completed_at, b.error, b.received, {schema}.batch_run_outcomes(b.id) AS run_outcomes
FROM {schema}.batches b WHERE b.id = %(id)s;

-- function: batch_run_outcomes
-- How the runs a batch's items made are doing, by outcome, as one JSON object: succeeded
-- (COMPLETED), failed (FAILED, CRASHED, TIMED_OUT, EXPIRED, SYSTEM_FAILURE), canceled,
-- running (EXECUTING or WAITING), queued (QUEUED or DELAYED) and runs (all of them). Read
-- through runs_batch_item_idx; the carriers (fairlane.batch_item) carry no batch_id and are
-- not among them.
CREATE OR REPLACE FUNCTION {schema}.batch_run_outcomes(target bigint)
RETURNS jsonb
LANGUAGE sql
STABLE
AS $$
SELECT jsonb_build_object(
    'succeeded', count(*) FILTER (WHERE r.status = 'COMPLETED'),
    'failed', count(*) FILTER (WHERE r.status IN ('FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED',
                                                  'SYSTEM_FAILURE')),
    'canceled', count(*) FILTER (WHERE r.status = 'CANCELED'),
    'running', count(*) FILTER (WHERE r.status IN ('EXECUTING', 'WAITING')),
    'queued', count(*) FILTER (WHERE r.status IN ('QUEUED', 'DELAYED')),
    'runs', count(*))
FROM {schema}.runs r
WHERE r.batch_id = target;
$$;

-- name: batch_run_ids
-- params: id bigint
SELECT i.index, i.state, i.run_id, i.error
FROM {schema}.batch_items i WHERE i.batch_id = %(id)s ORDER BY i.index;
