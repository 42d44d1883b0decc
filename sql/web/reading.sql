-- What the HTTP API and the dashboard read beyond the library's statements: one
-- environment's or queue's settings (without creating the row), a page of a batch's items.

-- name: get_environment_settings
-- params: name text
SELECT name, concurrency_limit, burst_factor, paused, size_limit
FROM {schema}.environments
WHERE name = %(name)s;

-- name: get_queue_settings
-- params: environment text, name text
SELECT environment, name, concurrency_limit, paused, size_limit, total_limit, rate_limit,
       rate_period_s, rate_burst
FROM {schema}.queues
WHERE environment = %(environment)s AND name = %(name)s;

-- name: batch_items_page
-- params: id bigint, after_index integer, state text, limit bigint
-- A batch's items by index from `after_index` (exclusive; NULL: the first), optionally only
-- those in `state` (FAILED: the items that became pre-failed runs or could not trigger).
SELECT i.index, i.state, i.run_id, i.error
FROM {schema}.batch_items i
WHERE i.batch_id = %(id)s
  AND (%(after_index)s::integer IS NULL OR i.index > %(after_index)s::integer)
  AND (%(state)s::text IS NULL OR i.state = %(state)s::text)
ORDER BY i.index
LIMIT %(limit)s;
