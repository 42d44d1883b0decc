-- Reading runs: one, a page of them, counts by status.

-- name: get_run
-- params: id bigint
SELECT id, environment, queue, task, payload, status, priority, attempts, max_attempts,
       available_at, created_at, started_at, finished_at, lease_token, lease_until, worker_id,
       result, error, tags, metadata, machine, max_duration_s, parent_run_id, idempotency_key,
       idempotency_key_expires_at, queued_at, queue_order, attempt_errors
FROM {schema}.runs
WHERE id = %(id)s;

-- name: count_runs_by_status
SELECT status, count(*) AS runs
FROM {schema}.runs
GROUP BY status
ORDER BY status;

-- name: list_runs
-- params: environment text, queue text, task text, statuses text[], tags text[], batch_id bigint,
-- params: idempotency_keys text[], before_id bigint, since_s double precision,
-- params: include_carriers boolean, limit bigint
-- Newest first, by the filter of runs_matching (sql/runs/filter.sql). The scan walks the
-- primary key backwards, filtering, so a rare filter value reads far; it is an operator's view,
-- not a hot path.
SELECT id, environment, queue, task, payload, status, priority, attempts, max_attempts,
       available_at, created_at, started_at, finished_at, lease_token, lease_until, worker_id,
       result, error, tags, metadata, machine, max_duration_s, parent_run_id, idempotency_key,
       idempotency_key_expires_at, queued_at, queue_order, attempt_errors
FROM {schema}.runs_matching(%(environment)s::text, %(queue)s::text, %(task)s::text,
                             %(statuses)s::text[], %(tags)s::text[], %(batch_id)s::bigint,
                             %(idempotency_keys)s::text[], %(before_id)s::bigint,
                             %(since_s)s::float8, %(include_carriers)s::boolean)
ORDER BY id DESC
LIMIT %(limit)s;
