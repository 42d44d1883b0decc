-- name: get_run
SELECT id, environment, queue, task, payload, status, priority, attempts, max_attempts,
       available_at, created_at, started_at, finished_at, lease_token, lease_until, worker_id,
       result, error, tags, metadata, machine, max_duration_s
FROM {schema}.runs
WHERE id = %(id)s;

-- name: count_runs_by_status
SELECT status, count(*) AS runs
FROM {schema}.runs
GROUP BY status
ORDER BY status;

-- name: list_runs
SELECT id, environment, queue, task, payload, status, priority, attempts, max_attempts,
       available_at, created_at, started_at, finished_at, lease_token, lease_until, worker_id,
       result, error, tags, metadata, machine, max_duration_s
FROM {schema}.runs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY id DESC
LIMIT %(limit)s;
