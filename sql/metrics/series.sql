-- The database-side metric series. Each reads partial indexes only (runs_held_idx,
-- runs_queued_idx, runs_delayed_queue_idx), never the runs table's finished history, so a
-- scrape costs the same with 1M finished runs as with none.

-- name: queue_series
-- Per queue: runs EXECUTING, QUEUED and DELAYED, and the age of the run at its head.
SELECT q.environment, q.name AS queue,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'EXECUTING')
           AS executing,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'QUEUED')
           AS queued,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'DELAYED')
           AS delayed,
       coalesce(extract(epoch FROM now() - (
           SELECT r.queued_at FROM {schema}.runs r
           WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'QUEUED'
           ORDER BY r.queue_order, r.id
           LIMIT 1)), 0)::float8 AS oldest_queued_s
FROM {schema}.queues q
ORDER BY q.environment, q.name;

-- name: periodic_job_series
-- Per periodic job: how long its last tick took, and whether it failed.
SELECT name, coalesce(extract(epoch FROM last_finished_at - last_started_at), 0)::float8
           AS last_duration_s,
       run_count, last_error IS NOT NULL AS failing
FROM {schema}.periodic_jobs
ORDER BY name;
