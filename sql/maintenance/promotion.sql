-- Periodic job: delayed runs that are due become QUEUED.

-- function: promote_delayed_runs
-- Delayed runs (first start, retry backoff, debounce) that are due become QUEUED, in batches of
-- promote_batch_size, at most promote_max_batches statements per tick (repeat_in_batches):
-- 20,000 runs due at once take one tick, not twenty. A run counts as queued from the moment it
-- was due (queued_at = available_at), so the tick that happens to promote it does not change
-- its place, and runs
-- promoted together keep the order of their due times. A run that never started is enqueued
-- for the first time here, so its TTL is armed now. Rows another session holds (a reschedule,
-- a cancel, another promotion) are skipped; a row changed since the statement's snapshot is
-- re-checked on its latest version by FOR UPDATE.
CREATE OR REPLACE FUNCTION {schema}.promote_delayed_runs()
RETURNS jsonb
LANGUAGE sql
AS $$
SELECT outcome || jsonb_build_object('woken', jsonb_array_length(outcome -> 'woken'))
FROM {schema}.repeat_in_batches(
    'promote_batch',
    {schema}.numeric_setting('promote_batch_size', 5000)::integer,
    {schema}.numeric_setting('promote_max_batches', 10)::integer) AS outcome;
$$;

-- function: promote_batch
-- One batch of due delayed runs. Each environment with promoted runs is announced, and named in
-- `woken`; PostgreSQL delivers one notification per channel and payload per transaction, so an
-- environment is announced once per tick however many batches it had runs in.
CREATE OR REPLACE FUNCTION {schema}.promote_batch(batch_size integer)
RETURNS jsonb
LANGUAGE sql
AS $$
WITH due AS (
    SELECT r.id
    FROM {schema}.runs r
    WHERE r.status = 'DELAYED' AND r.available_at <= now()
    ORDER BY r.available_at
    LIMIT batch_size
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE {schema}.runs AS r
    SET status = 'QUEUED',
        queued_at = r.available_at,
        expires_at = CASE WHEN r.attempts = 0 AND r.ttl_s IS NOT NULL AND r.expires_at IS NULL
                          THEN now() + make_interval(secs => r.ttl_s)
                          ELSE r.expires_at END
    FROM due
    WHERE r.id = due.id
    RETURNING r.environment
), woken AS (
    SELECT envs.environment, pg_notify({channel}, envs.environment)
    FROM (SELECT DISTINCT environment FROM promoted) AS envs
)
SELECT jsonb_build_object('rows', count(*), 'promoted', count(*),
                          'woken', coalesce((SELECT jsonb_agg(environment) FROM woken), '[]'))
FROM promoted;
$$;
