-- Maintenance functions, installed by fairlane migrate. Each takes its batch size, returns a
-- jsonb summary and is safe to run from several sessions at once (SKIP LOCKED). The periodic
-- job runner calls them; an operator can call them by hand or from pg_cron.

-- function: reclaim_expired_leases
-- A run whose lease lapsed goes back to QUEUED; the claim already counted its attempt, so on
-- the last attempt it ends CRASHED instead. A WAITING run whose worker died goes back too and
-- is re-executed from the start (its waits find the same waitpoints). The stale owner stays
-- fenced: its token is cleared.
CREATE OR REPLACE FUNCTION {schema}.reclaim_expired_leases(batch_size integer DEFAULT 1000)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    outcome jsonb;
BEGIN
    WITH expired AS (
        SELECT id
        FROM {schema}.runs
        WHERE status IN ('EXECUTING', 'WAITING') AND lease_until < now()
        ORDER BY lease_until
        LIMIT batch_size
        FOR UPDATE SKIP LOCKED
    ), reclaimed AS (
        UPDATE {schema}.runs AS r
        SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'CRASHED' ELSE 'QUEUED' END,
            finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
            error = jsonb_build_object(
                'type', 'LeaseExpired',
                'code', 'LEASE_EXPIRED',
                'message', 'lease of worker ' || coalesce(r.worker_id, '?')
                           || ' lapsed during attempt ' || r.attempts),
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
        'requeued', count(*) FILTER (WHERE status = 'QUEUED'),
        'crashed', count(*) FILTER (WHERE status = 'CRASHED'),
        'woken', (SELECT count(*) FROM woken))
    INTO outcome
    FROM reclaimed;
    RETURN outcome;
END;
$$;

-- function: promote_delayed_runs
-- Delayed runs (first start, retry backoff, debounce) that are due become QUEUED, in batches of
-- promote_batch_size, at most promote_max_batches statements per tick: 20,000 runs due at once
-- take one tick, not twenty. A run counts as queued from the moment it was due (queued_at =
-- available_at), so the tick that happens to promote it does not change its place, and runs
-- promoted together keep the order of their due times. A run that never started is enqueued
-- for the first time here, so its TTL is armed now. Rows another session holds (a reschedule,
-- a cancel, another promotion) are skipped; a row changed since the statement's snapshot is
-- re-checked on its latest version by FOR UPDATE.
CREATE OR REPLACE FUNCTION {schema}.promote_delayed_runs()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    batch_size integer := {schema}.numeric_setting('promote_batch_size', 5000);
    max_batches integer := {schema}.numeric_setting('promote_max_batches', 10);
    promoted integer;
    total integer := 0;
    statements integer := 0;
    environments text[];
    woken text[] := '{{}}';
BEGIN
    LOOP
        WITH due AS (
            SELECT r.id
            FROM {schema}.runs r
            WHERE r.status = 'DELAYED' AND r.available_at <= now()
            ORDER BY r.available_at
            LIMIT batch_size
            FOR UPDATE SKIP LOCKED
        ), promoted_runs AS (
            UPDATE {schema}.runs AS r
            SET status = 'QUEUED',
                queued_at = r.available_at,
                expires_at = CASE WHEN r.attempts = 0 AND r.ttl_s IS NOT NULL
                                       AND r.expires_at IS NULL
                                  THEN now() + make_interval(secs => r.ttl_s)
                                  ELSE r.expires_at END
            FROM due
            WHERE r.id = due.id
            RETURNING r.environment
        )
        SELECT count(*), array_agg(DISTINCT p.environment)
        INTO promoted, environments
        FROM promoted_runs p;
        total := total + promoted;
        statements := statements + 1;
        woken := woken || coalesce(environments, '{{}}');
        EXIT WHEN promoted < batch_size OR statements >= max_batches;
    END LOOP;
    -- One notification per environment; delivered when the tick commits.
    woken := ARRAY(SELECT DISTINCT w.name FROM unnest(woken) AS w(name));
    PERFORM pg_notify({channel}, w.name) FROM unnest(woken) AS w(name);
    RETURN jsonb_build_object('promoted', total, 'statements', statements,
                              'woken', cardinality(woken));
END;
$$;

-- function: run_due_periodic_jobs
-- Runs every due periodic job once. The row lock taken with SKIP LOCKED is the claim: another
-- session skips the row, and once this transaction commits the row is no longer due. A crash
-- rolls the transaction back, so the job is simply due again. Each job runs in a subtransaction
-- so one failing job records its error without undoing the others.
CREATE OR REPLACE FUNCTION {schema}.run_due_periodic_jobs()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    job record;
    outcome jsonb;
    ran jsonb := '{{}}'::jsonb;
BEGIN
    FOR job IN
        SELECT name, function, interval_s, next_due_at
        FROM {schema}.periodic_jobs
        WHERE enabled AND next_due_at <= now()
        ORDER BY next_due_at
        FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
            EXECUTE 'SELECT ' || quote_ident({schema_name}) || '.' || quote_ident(job.function) || '()'
                INTO outcome;
            UPDATE {schema}.periodic_jobs
            SET last_result = outcome, last_error = NULL
            WHERE name = job.name;
        EXCEPTION WHEN OTHERS THEN
            outcome := jsonb_build_object('error', SQLERRM);
            UPDATE {schema}.periodic_jobs
            SET last_result = NULL, last_error = SQLERRM
            WHERE name = job.name;
        END;
        -- The next tick after now, so a job that fell behind runs once, not once per missed tick.
        UPDATE {schema}.periodic_jobs
        SET last_started_at = now(),
            last_finished_at = clock_timestamp(),
            run_count = run_count + 1,
            next_due_at = job.next_due_at + make_interval(secs => job.interval_s * (
                floor(extract(epoch FROM now() - job.next_due_at) / job.interval_s) + 1))
        WHERE name = job.name;
        ran := ran || jsonb_build_object(job.name, outcome);
    END LOOP;
    RETURN ran;
END;
$$;

