-- name: run_due_periodic_jobs
SELECT {schema}.run_due_periodic_jobs() AS ran;

-- name: list_periodic_jobs
SELECT name, function, interval_s, enabled, next_due_at, last_started_at, last_finished_at,
       last_result, last_error, run_count
FROM {schema}.periodic_jobs
ORDER BY name;

-- name: make_periodic_job_due
UPDATE {schema}.periodic_jobs SET next_due_at = now() WHERE name = %(name)s;

-- name: configure_periodic_job
UPDATE {schema}.periodic_jobs
SET interval_s = coalesce(%(interval_s)s, interval_s),
    enabled = coalesce(%(enabled)s, enabled)
WHERE name = %(name)s
RETURNING name;
