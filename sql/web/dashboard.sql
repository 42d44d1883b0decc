-- What the dashboard reads beyond the API's statements: throughput,
-- a run's children, waitpoints and batch, recent batches (busy.sql: environments and queues).

-- name: finished_per_minute
-- params: environments text[], minutes integer
-- Runs of the given environments (a page of busy_environments) that ended in each of the last
-- `minutes` minutes, by environment and final status.
-- The lower bound on the pruning index's expression lets it serve the scan (an ended run's
-- key expiry only ever raises the expression above its end).
SELECT date_trunc('minute', finished_at) AS minute, environment, status, count(*) AS runs
FROM {schema}.runs
WHERE finished_at IS NOT NULL
  -- Batch carriers are fairlane's own work, not the tenant's.
  AND queue <> '__batches__'
  AND environment = ANY(%(environments)s::text[])
  AND GREATEST(finished_at,
      CASE
          WHEN idempotency_key IS NOT NULL AND (status = ANY (ARRAY['COMPLETED'::text, 'CANCELED'::text]))
          THEN idempotency_key_expires_at
          ELSE NULL::timestamp with time zone
      END) >= now() - make_interval(mins => %(minutes)s)
  AND finished_at >= date_trunc('minute', now()) - make_interval(mins => %(minutes)s - 1)
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: run_children
-- params: id bigint, limit bigint
SELECT id, task, status, queue, created_at, finished_at
FROM {schema}.runs
WHERE parent_run_id = %(id)s
ORDER BY id
LIMIT %(limit)s;

-- name: run_waits
-- params: id bigint, limit bigint
-- What a run waits or waited on, by attempt (its wait_attempt: an attempt after a failure
-- makes its own waits), call position and item; the latest attempt's first.
SELECT edge.attempt, edge.position, edge.item, w.id AS waitpoint_id, w.kind, w.status,
       w.run_id, w.complete_after, w.timeout_at, w.completed_at, w.is_error
FROM {schema}.run_waitpoints edge
JOIN {schema}.waitpoints w ON w.id = edge.waitpoint_id
WHERE edge.run_id = %(id)s
ORDER BY edge.attempt DESC, edge.position, edge.item
LIMIT %(limit)s;

-- name: run_batch
-- params: id bigint
SELECT batch_id, batch_index FROM {schema}.runs WHERE id = %(id)s;

-- name: recent_batches
-- params: environment text, before_id bigint, limit bigint
-- Newest first; `environment` NULL: every one.
SELECT b.id, b.environment, b.run_count, b.status, b.sealed, b.succeeded, b.failed,
       b.parent_run_id, b.waitpoint_id, b.idempotency_key, b.created_at, b.sealed_at,
       b.completed_at, b.received, {schema}.batch_run_outcomes(b.id) AS run_outcomes
FROM {schema}.batches b
WHERE (%(environment)s::text IS NULL OR b.environment = %(environment)s::text)
  AND (%(before_id)s::bigint IS NULL OR b.id < %(before_id)s::bigint)
ORDER BY b.id DESC
LIMIT %(limit)s;

-- name: schedules_page
-- params: search text, limit bigint, offset bigint
-- A page of cron schedules, the active ones first by their next fire, then the paused ones;
-- each with its last fire (the tick, and the run it made with that run's status) and
-- `matching`: how many match in all. `search`: a part of the key, task or environment, any case.
SELECT s.id, s.environment, s.key, s.task, s.cron, s.timezone, s.declared, s.paused,
       s.next_fire_at, s.last_tick, s.last_run_id, r.status AS last_run_status,
       count(*) OVER () AS matching
FROM {schema}.schedules s
LEFT JOIN {schema}.runs r ON r.id = s.last_run_id
WHERE %(search)s::text IS NULL
   OR strpos(lower(s.key), lower(%(search)s::text)) > 0
   OR strpos(lower(s.task), lower(%(search)s::text)) > 0
   OR strpos(lower(s.environment), lower(%(search)s::text)) > 0
ORDER BY s.paused, s.next_fire_at, s.environment, s.key
LIMIT %(limit)s OFFSET %(offset)s;
