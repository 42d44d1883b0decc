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
-- params: idempotency_keys text[], before_id bigint, include_carriers boolean, limit bigint
-- Newest first, every filter optional (NULL: any). `tags` matches runs carrying all of them;
-- `batch_id` the runs a batch's items made; `idempotency_keys` the runs whose stored key, active
-- or freed, is one of them (RunFilter.query() gives a key's stored forms);
-- `before_id` pages: pass the last id of the previous page. Batch carrier runs (the reserved
-- `__batches__` queue) are left out unless `include_carriers`. The scan walks the primary key
-- backwards, filtering, so a rare filter value reads far; it is an operator's view, not a hot path.
SELECT id, environment, queue, task, payload, status, priority, attempts, max_attempts,
       available_at, created_at, started_at, finished_at, lease_token, lease_until, worker_id,
       result, error, tags, metadata, machine, max_duration_s, parent_run_id, idempotency_key,
       idempotency_key_expires_at, queued_at, queue_order, attempt_errors
FROM {schema}.runs
WHERE (%(environment)s::text IS NULL OR environment = %(environment)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[]))
  AND (%(tags)s::text[] IS NULL OR tags @> %(tags)s::text[])
  AND (%(batch_id)s::bigint IS NULL OR batch_id = %(batch_id)s::bigint)
  AND (%(idempotency_keys)s::text[] IS NULL
       OR idempotency_key = ANY(%(idempotency_keys)s::text[])
       OR inactive_idempotency_key = ANY(%(idempotency_keys)s::text[]))
  AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
  AND (%(include_carriers)s::boolean OR queue <> '__batches__')
ORDER BY id DESC
LIMIT %(limit)s;
