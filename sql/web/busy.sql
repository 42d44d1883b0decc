-- The dashboard's environments and queues, busiest first, one page at a time: what it reads
-- stays the same size however many environments and queues there are
-- (tests/web/test_dashboard_scale.py).
-- "Busy" is the runs an environment or queue holds right now: running (EXECUTING), queued and
-- delayed. Those are counted from the partial indexes that hold only such runs (runs_held_idx,
-- runs_queued_keyless_idx and runs_queued_key_idx, runs_delayed_queue_idx), one branch per
-- index so each branch matches its index's predicate: the cost follows the live runs, never
-- the ended ones. Batch carriers (the reserved `__batches__` queue) are fairlane's own work
-- and neither counted nor listed.

-- name: busy_environments
-- params: search text, name text, limit bigint, offset bigint
-- A page of environments, busiest first then by name, with their settings, live counts and
-- `matching`: how many environments match in all (the pager's). `search`: a part of the name,
-- any case; `name`: exactly that one. NULL: any.
WITH live AS (
    SELECT environment,
           count(*) FILTER (WHERE status = 'EXECUTING') AS running,
           count(*) FILTER (WHERE status = 'QUEUED') AS queued,
           count(*) FILTER (WHERE status = 'DELAYED') AS delayed
    FROM (
        SELECT environment, queue, status FROM {schema}.runs WHERE status = 'EXECUTING'
        UNION ALL
        SELECT environment, queue, status FROM {schema}.runs
        WHERE status = 'QUEUED' AND concurrency_key IS NULL
        UNION ALL
        SELECT environment, queue, status FROM {schema}.runs
        WHERE status = 'QUEUED' AND concurrency_key IS NOT NULL
        UNION ALL
        SELECT environment, queue, status FROM {schema}.runs WHERE status = 'DELAYED'
    ) held
    WHERE queue <> '__batches__'
    GROUP BY environment
)
SELECT name, env_limit, burst_factor, paused, size_limit, running, queued, delayed,
       count(*) OVER () AS matching
FROM (
    SELECT e.name, e.concurrency_limit AS env_limit, e.burst_factor, e.paused, e.size_limit,
           coalesce(l.running, 0) AS running, coalesce(l.queued, 0) AS queued,
           coalesce(l.delayed, 0) AS delayed,
           coalesce(l.running + l.queued + l.delayed, 0) AS busy
    FROM {schema}.environments e
    LEFT JOIN live l ON l.environment = e.name
    -- A fence: the filters below stay out of this join. Under a prepared statement's generic
    -- plan they would make the planner expect a handful of environments, and join each one
    -- to the counts by a nested loop (10,000 x 10,000 comparisons, seconds); without them it
    -- expects every environment and hashes.
    OFFSET 0
) ranked
WHERE (%(search)s::text IS NULL OR strpos(lower(name), lower(%(search)s::text)) > 0)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
ORDER BY busy DESC, name
LIMIT %(limit)s OFFSET %(offset)s;

-- name: busy_queues
-- params: environments text[], search text, per_environment bigint, offset bigint
-- The queues of the given environments (a page of busy_environments), at most
-- `per_environment` of each from `offset`, busiest first then by name, in the order the
-- environments are given; with their limits, live counts, their head (the next run in claim
-- order, and how long it has waited) and `matching`: how many of the environment's queues
-- match in all. `search`: a part of the queue's name, any case.
WITH live AS MATERIALIZED (
    SELECT environment, queue,
           count(*) FILTER (WHERE status = 'EXECUTING') AS running,
           count(*) FILTER (WHERE status = 'QUEUED') AS queued,
           count(*) FILTER (WHERE status = 'DELAYED') AS delayed
    FROM (
        SELECT environment, queue, status FROM {schema}.runs
        WHERE status = 'EXECUTING' AND environment = ANY(%(environments)s::text[])
        UNION ALL
        SELECT environment, queue, status FROM {schema}.runs
        WHERE status = 'QUEUED' AND concurrency_key IS NULL
          AND environment = ANY(%(environments)s::text[])
        UNION ALL
        SELECT environment, queue, status FROM {schema}.runs
        WHERE status = 'QUEUED' AND concurrency_key IS NOT NULL
          AND environment = ANY(%(environments)s::text[])
        UNION ALL
        SELECT environment, queue, status FROM {schema}.runs
        WHERE status = 'DELAYED' AND environment = ANY(%(environments)s::text[])
    ) held
    GROUP BY environment, queue
)
SELECT page.environment, page.queue, page.queue_limit, page.queue_paused,
       page.queue_size_limit, page.running, page.queued, page.delayed, page.matching,
       head.id AS head_run_id,
       extract(epoch FROM now() - head.queued_at)::float8 AS head_waited_s
FROM unnest(%(environments)s::text[]) WITH ORDINALITY AS env(name, n)
CROSS JOIN LATERAL (
    SELECT q.environment, q.name AS queue, q.concurrency_limit AS queue_limit,
           q.paused AS queue_paused, q.size_limit AS queue_size_limit,
           coalesce(l.running, 0) AS running, coalesce(l.queued, 0) AS queued,
           coalesce(l.delayed, 0) AS delayed,
           coalesce(l.running + l.queued + l.delayed, 0) AS busy,
           count(*) OVER () AS matching
    FROM {schema}.queues q
    LEFT JOIN live l ON l.environment = q.environment AND l.queue = q.name
    WHERE q.environment = env.name AND q.name <> '__batches__'
      AND (%(search)s::text IS NULL OR strpos(lower(q.name), lower(%(search)s::text)) > 0)
    ORDER BY busy DESC, q.name
    LIMIT %(per_environment)s OFFSET %(offset)s
) page
LEFT JOIN LATERAL {schema}.queue_head_runs(page.environment, page.queue, 1) AS head ON true
ORDER BY env.n, page.busy DESC, page.queue;

-- name: oldest_heads
-- params: environments text[]
-- For each of the given environments (a page of busy_environments), the head (the next run in
-- claim order) that has waited longest among all its queues, shown or not. The queues holding
-- QUEUED runs are found by skipping from one to the next within each environment
-- (next_queued_queue: a descent of each queued index, none for an idle queue), then each one's
-- head is read (queue_head_runs). The batch carriers' queue is skipped through like any other
-- and left out after.
WITH RECURSIVE waiting AS (
    SELECT first.environment, first.queue
    FROM unnest(%(environments)s::text[]) AS env(name)
    CROSS JOIN LATERAL {schema}.next_queued_queue(env.name, '') AS first
    WHERE first.environment = env.name
    UNION ALL
    SELECT later.environment, later.queue
    FROM waiting w
    CROSS JOIN LATERAL {schema}.next_queued_queue(w.environment, w.queue) AS later
    WHERE later.environment = w.environment
)
SELECT DISTINCT ON (w.environment) w.environment, head.id AS run_id,
       extract(epoch FROM now() - head.queued_at)::float8 AS waited_s
FROM waiting w
CROSS JOIN LATERAL {schema}.queue_head_runs(w.environment, w.queue, 1) AS head
WHERE w.queue <> '__batches__'
ORDER BY w.environment, head.queued_at, head.id;
