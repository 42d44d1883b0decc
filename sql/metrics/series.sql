-- The database-side metric series. Each reads partial indexes only (runs_held_idx, the queued
-- runs' runs_queued_keyless_idx and runs_queued_key_idx, runs_delayed_queue_idx), never the
-- runs table's finished history, so a scrape costs the same with 1M finished runs as with none.

-- name: queue_series
-- Per queue: runs EXECUTING, QUEUED and DELAYED, and the age of the run at its head.
SELECT q.environment, q.name AS queue,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'EXECUTING')
           AS executing,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'QUEUED'
          AND r.concurrency_key IS NULL)
       + (SELECT count(*) FROM {schema}.runs r
          WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'QUEUED'
            AND r.concurrency_key IS NOT NULL)
           AS queued,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'DELAYED')
           AS delayed,
       coalesce(extract(epoch FROM now() - (
           SELECT head.queued_at FROM {schema}.queue_head_runs(q.environment, q.name, 1) AS head
           )), 0)::float8 AS oldest_queued_s
FROM {schema}.queues q
ORDER BY q.environment, q.name;

-- name: periodic_job_series
-- Per periodic job: how long its last tick took, and whether it failed.
SELECT name, coalesce(extract(epoch FROM last_finished_at - last_started_at), 0)::float8
           AS last_duration_s,
       run_count, last_error IS NOT NULL AS failing
FROM {schema}.periodic_jobs
ORDER BY name;

-- name: key_series
-- params: per_queue bigint, most bigint
-- The busiest concurrency keys (running plus queued runs, then by name), at most `per_queue`
-- of any one queue and `most` in all: the scrape's key series stay bounded whatever the number
-- of keys. Each side is one pass over a partial index, grouped in the index's order
-- (runs_queued_key_idx for the queued runs, runs_held_idx for the executing ones), so the cost
-- follows the runs not ended, as queue_series' does, and a key is a group, not a query.
WITH queued AS (
    SELECT r.environment, r.queue, r.concurrency_key AS key, count(*) AS n
    FROM {schema}.runs r
    WHERE r.status = 'QUEUED' AND r.concurrency_key IS NOT NULL
    GROUP BY 1, 2, 3
), running AS (
    SELECT r.environment, r.queue, r.concurrency_key AS key, count(*) AS n
    FROM {schema}.runs r
    WHERE r.status = 'EXECUTING' AND r.concurrency_key IS NOT NULL
    GROUP BY 1, 2, 3
), ranked AS (
    SELECT environment, queue, key, coalesce(running.n, 0) AS running,
           coalesce(queued.n, 0) AS queued,
           row_number() OVER (
               PARTITION BY environment, queue
               ORDER BY coalesce(running.n, 0) + coalesce(queued.n, 0) DESC, key) AS nth
    FROM running FULL JOIN queued USING (environment, queue, key)
)
SELECT environment, queue, key AS concurrency_key, running, queued
FROM ranked
WHERE nth <= %(per_queue)s
ORDER BY running + queued DESC, environment, queue, key
LIMIT %(most)s;
