-- Periodic job: TTL expiry. A TTL limits how long a run waits before it first starts: it is
-- armed on first enqueue and disarmed (expires_at cleared) by the claim that starts the run,
-- so a run handed back later (release, lease reclaim, sweeper) never expires. The claim skips
-- exactly the runs this expires (QUEUED, expires_at passed, no attempt counted), so a lapsed
-- run is never started and never left behind.

-- function: expire_ttl_runs
-- Settings: ttl_batch_size runs per statement, ttl_max_batches statements per tick.
CREATE OR REPLACE FUNCTION {schema}.expire_ttl_runs()
RETURNS jsonb
LANGUAGE sql
AS $$
SELECT {schema}.repeat_in_batches(
    'expire_ttl_batch',
    {schema}.numeric_setting('ttl_batch_size', 1000)::integer,
    {schema}.numeric_setting('ttl_max_batches', 10)::integer);
$$;

-- function: expire_ttl_batch
-- One batch: queued runs whose TTL lapsed end EXPIRED.
CREATE OR REPLACE FUNCTION {schema}.expire_ttl_batch(batch_size integer)
RETURNS jsonb
LANGUAGE sql
AS $$
WITH lapsed AS (
    SELECT r.id
    FROM {schema}.runs r
    WHERE r.status = 'QUEUED' AND r.expires_at <= now() AND r.attempts = 0
    ORDER BY r.expires_at
    LIMIT batch_size
    FOR UPDATE SKIP LOCKED
), expired AS (
    UPDATE {schema}.runs AS r
    SET status = 'EXPIRED',
        finished_at = now(),
        error = jsonb_build_object(
            'type', 'TTLExpired',
            'code', 'TTL_EXPIRED',
            'message', 'run was still queued when its TTL of ' || r.ttl_s || 's lapsed')
    FROM lapsed
    WHERE r.id = lapsed.id
    RETURNING r.id
)
SELECT jsonb_build_object('rows', count(*), 'expired', count(*)) FROM expired;
$$;
