-- function: expire_ttl_runs
-- Queued runs whose TTL lapsed end EXPIRED, in batches of ttl_batch_size, at most
-- ttl_max_batches statements per tick. A TTL limits how long a run waits before it first
-- starts: it is armed on first enqueue and disarmed (expires_at cleared) by the claim that
-- starts the run, so a run handed back later (release, lease reclaim, sweeper) never expires.
-- The claim skips exactly the runs this expires (QUEUED, expires_at passed, no attempt
-- counted), so a lapsed run is never started and never left behind.
CREATE OR REPLACE FUNCTION {schema}.expire_ttl_runs()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    batch_size integer := {schema}.numeric_setting('ttl_batch_size', 1000);
    max_batches integer := {schema}.numeric_setting('ttl_max_batches', 10);
    expired integer;
    total integer := 0;
    statements integer := 0;
BEGIN
    LOOP
        WITH lapsed AS (
            SELECT r.id
            FROM {schema}.runs r
            WHERE r.status = 'QUEUED' AND r.expires_at <= now() AND r.attempts = 0
            ORDER BY r.expires_at
            LIMIT batch_size
            FOR UPDATE SKIP LOCKED
        )
        UPDATE {schema}.runs AS r
        SET status = 'EXPIRED',
            finished_at = now(),
            error = jsonb_build_object(
                'type', 'TTLExpired',
                'code', 'TTL_EXPIRED',
                'message', 'run was still queued when its TTL of ' || r.ttl_s || 's lapsed')
        FROM lapsed
        WHERE r.id = lapsed.id;
        GET DIAGNOSTICS expired = ROW_COUNT;
        total := total + expired;
        statements := statements + 1;
        EXIT WHEN expired < batch_size OR statements >= max_batches;
    END LOOP;
    RETURN jsonb_build_object('expired', total, 'statements', statements);
END;
$$;

