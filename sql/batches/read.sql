-- Reading batches.

-- name: get_batch
-- params: id bigint
SELECT b.id, b.environment, b.run_count, b.status, b.sealed, b.succeeded, b.failed,
       b.parent_run_id, b.waitpoint_id, b.idempotency_key, b.created_at, b.sealed_at,
       b.completed_at, b.error, b.received
FROM {schema}.batches b WHERE b.id = %(id)s;

-- name: batch_run_ids
-- params: id bigint
SELECT i.index, i.state, i.run_id, i.error
FROM {schema}.batch_items i WHERE i.batch_id = %(id)s ORDER BY i.index;
