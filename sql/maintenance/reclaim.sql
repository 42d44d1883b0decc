-- Periodic job: lease reclaim.

-- function: reclaim_expired_leases
-- A run whose lease lapsed goes back to QUEUED; the claim already counted its attempt, so on
-- the last attempt it ends CRASHED instead. A WAITING run whose worker died goes back too and
-- is re-executed from the start (its waits find the same waitpoints). The stale owner stays
-- fenced: its token is cleared. Settings: reclaim_batch_size runs per statement,
-- reclaim_max_batches statements per tick (many workers dying at once are one tick's work).
-- The lease's end is in no index (a heartbeat is then a HOT update): the lapsed leases are
-- found by walking runs_held_idx, the runs workers hold, which is a bounded set.
CREATE OR REPLACE FUNCTION {schema}.reclaim_expired_leases()
RETURNS jsonb
LANGUAGE sql
AS $$
SELECT {schema}.repeat_in_batches(
    'reclaim_batch',
    {schema}.numeric_setting('reclaim_batch_size', 1000)::integer,
    {schema}.numeric_setting('reclaim_max_batches', 10)::integer);
$$;

-- function: reclaim_batch
-- A plain index scan, not a bitmap one: it marks the entries of runs that ended since the last
-- vacuum dead as it passes them, so later ticks skip their heap fetch; a bitmap scan marks none
-- and fetches them at every tick (bench/sittings/11-one-index-of-held-runs.md). Nor a
-- sequential scan, which a plan made while the table held a few runs would keep.
CREATE OR REPLACE FUNCTION {schema}.reclaim_batch(batch_size integer)
RETURNS jsonb
LANGUAGE sql
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
WITH expired AS (
    SELECT id, jsonb_build_object(
               'type', 'LeaseExpired',
               'code', 'LEASE_EXPIRED',
               'message', 'lease of worker ' || coalesce(worker_id, '?')
                          || ' lapsed during attempt ' || attempts) AS error
    FROM {schema}.runs
    WHERE status IN ('EXECUTING', 'WAITING') AND lease_until < now()
    ORDER BY lease_until
    LIMIT batch_size
    FOR UPDATE SKIP LOCKED
), reclaimed AS (
    UPDATE {schema}.runs AS r
    SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'CRASHED' ELSE 'QUEUED' END,
        finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
        error = expired.error,
        attempt_errors = {schema}.with_attempt_error(r.attempt_errors, r.attempts, expired.error),
        lease_token = NULL,
        lease_until = NULL,
        worker_id = NULL,
        resume_ready = false
    FROM expired
    WHERE r.id = expired.id
    RETURNING r.status, r.environment
), woken AS (
    SELECT pg_notify({channel}, environment)
    FROM (SELECT DISTINCT environment FROM reclaimed WHERE status = 'QUEUED') AS envs
)
SELECT jsonb_build_object(
    'rows', count(*),
    'requeued', count(*) FILTER (WHERE status = 'QUEUED'),
    'crashed', count(*) FILTER (WHERE status = 'CRASHED'),
    'woken', (SELECT count(*) FROM woken))
FROM reclaimed;
$$;
