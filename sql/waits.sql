-- Statements behind RunContext.trigger_and_wait and friends, run in one transaction each.

-- name: wait_edges_at
SELECT edge.item, edge.waitpoint_id
FROM {schema}.run_waitpoints AS edge
WHERE edge.run_id = %(run_id)s AND edge.position = %(position)s
ORDER BY edge.item;

-- name: lock_awaited_runs
-- Serialises with the statement that finishes a child: either the child finishes first and its
-- waitpoint is created completed, or has_waiters is set first and the finishing trigger fires.
SELECT id FROM {schema}.runs WHERE id = ANY(%(run_ids)s::bigint[]) ORDER BY id DESC FOR UPDATE;

-- name: ensure_run_waitpoints
-- After lock_awaited_runs, in the same transaction.
SELECT run_id, waitpoint_id FROM {schema}.ensure_run_waitpoints(%(run_ids)s::bigint[]);

-- name: create_time_waitpoint
INSERT INTO {schema}.waitpoints (kind, status, complete_after)
VALUES ('DATETIME', 'PENDING', coalesce(%(at)s::timestamptz, now() + make_interval(secs => %(delay_s)s)))
RETURNING id;

-- name: lock_waitpoints
-- Before a wait points edges at waitpoints: each is locked FOR SHARE, so the pruner (which
-- locks its candidates FOR UPDATE SKIP LOCKED) can neither take one nor have taken one that
-- this wait then finds missing. Returns the ones that exist.
SELECT w.id FROM {schema}.waitpoints w
WHERE w.id = ANY(%(waitpoint_ids)s::bigint[])
ORDER BY w.id
FOR SHARE;

-- name: insert_wait_edges
INSERT INTO {schema}.run_waitpoints (run_id, position, item, waitpoint_id)
SELECT %(run_id)s, %(position)s, edge.item, edge.waitpoint_id
FROM unnest(%(items)s::integer[], %(waitpoint_ids)s::bigint[]) AS edge(item, waitpoint_id)
ON CONFLICT DO NOTHING;

-- name: begin_waiting
SELECT {schema}.begin_waiting(%(run_id)s, %(token)s);

-- name: resume_run
SELECT {schema}.resume_run(%(run_id)s, %(token)s);

-- name: is_resume_ready
SELECT resume_ready FROM {schema}.runs WHERE id = %(run_id)s AND lease_token = %(token)s;

-- name: wait_results
SELECT edge.item, w.status, w.is_error, w.output, w.run_id
FROM {schema}.run_waitpoints AS edge
JOIN {schema}.waitpoints AS w ON w.id = edge.waitpoint_id
WHERE edge.run_id = %(run_id)s AND edge.position = %(position)s
ORDER BY edge.item;

-- name: create_token
SELECT {schema}.create_token(%(key)s, %(key_ttl_s)s, %(timeout_s)s);

-- name: complete_token
WITH done AS (
    UPDATE {schema}.waitpoints AS w
    SET status = 'COMPLETED', completed_at = now(), is_error = false,
        output = %(output)s::jsonb
    WHERE w.id = %(id)s AND w.kind = 'MANUAL' AND w.status = 'PENDING'
    RETURNING w.id
)
SELECT id, {schema}.wake_waiting_runs(ARRAY[id]) FROM done;

-- name: token_timeout_at_most
UPDATE {schema}.waitpoints
SET timeout_at = least(coalesce(timeout_at, 'infinity'), now() + make_interval(secs => %(timeout_s)s))
WHERE id = %(id)s AND kind = 'MANUAL' AND status = 'PENDING';

-- name: get_waitpoint
SELECT id, kind, status, is_error, output, run_id, completed_at
FROM {schema}.waitpoints WHERE id = %(id)s;
