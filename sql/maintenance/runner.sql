-- The periodic-job runner. Every worker calls it; so can pg_cron (CALL it). Each job is a SQL
-- function of this schema returning jsonb, and runs in a transaction of its own: a slow one
-- (pruning) holds back none of the others (lease reclaim, promotion), and locks one job took
-- are let go before the next starts.

-- function: run_due_periodic_jobs
-- Runs each due job once, committing after each (so CALL it outside a transaction block; it is
-- a procedure); a job that is behind runs again at the next call, not in this one. Returns what each job returned, by name, and how long each took in seconds
-- (`took`, what a worker's fairlane_periodic_job_duration_seconds observes: every tick is run,
-- and so observed, by exactly one session).
CREATE OR REPLACE PROCEDURE {schema}.run_due_periodic_jobs(
    INOUT ran jsonb DEFAULT NULL, INOUT took jsonb DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    one jsonb;
    done text[] := '{{}}';
    started timestamptz;
BEGIN
    ran := '{{}}'::jsonb;
    took := '{{}}'::jsonb;
    LOOP
        started := clock_timestamp();
        one := {schema}.run_next_due_job(done);
        EXIT WHEN one IS NULL;
        ran := ran || one;
        took := took || (SELECT jsonb_object_agg(k.job,
                                                 extract(epoch FROM clock_timestamp() - started))
                         FROM jsonb_object_keys(one) AS k(job));
        done := done || ARRAY(SELECT jsonb_object_keys(one));
        COMMIT;
    END LOOP;
END;
$$;

-- function: run_next_due_job
-- Runs the job that is due longest, not in `done`, and returns {name: outcome}, or NULL when
-- none is due. The row lock taken with SKIP LOCKED is the claim: another session skips the
-- row, and once this transaction commits the row is no longer due. A crash rolls the
-- transaction back, so the job is simply due again. The job runs in a subtransaction, so its
-- failure is recorded (last_error) and its tick still moves on.
CREATE OR REPLACE FUNCTION {schema}.run_next_due_job(done text[])
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    job record;
    outcome jsonb;
BEGIN
    SELECT j.name, j.function, j.interval_s, j.next_due_at INTO job
    FROM {schema}.periodic_jobs j
    WHERE j.enabled AND j.next_due_at <= now() AND j.name <> ALL(done)
    ORDER BY j.next_due_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
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
    -- The next tick after now, so a job that missed ticks runs once, not once per missed tick.
    -- A job that stopped with work left (`behind`: its time budget or batch count ran out) is
    -- left due at the last tick instead, so the next call runs it again at once; its ticks
    -- stay on the grid of its interval, so catching up does not shift the later ones.
    UPDATE {schema}.periodic_jobs
    SET last_started_at = now(),
        last_finished_at = clock_timestamp(),
        run_count = run_count + 1,
        next_due_at = job.next_due_at + make_interval(secs => job.interval_s * (
            floor(extract(epoch FROM now() - job.next_due_at) / job.interval_s)
            + CASE WHEN coalesce((outcome ->> 'behind')::boolean, false) THEN 0 ELSE 1 END))
    WHERE name = job.name;
    RETURN jsonb_build_object(job.name, outcome);
END;
$$;

-- name: run_due_periodic_jobs
-- On an autocommit connection: the procedure commits after each job.
CALL {schema}.run_due_periodic_jobs(NULL, NULL);

-- name: list_periodic_jobs
SELECT name, function, interval_s, enabled, next_due_at, last_started_at, last_finished_at,
       last_result, last_error, run_count
FROM {schema}.periodic_jobs
ORDER BY name;

-- name: make_periodic_job_due
-- params: name text
UPDATE {schema}.periodic_jobs SET next_due_at = now() WHERE name = %(name)s
RETURNING name;

-- name: configure_periodic_job
-- params: interval_s double precision, enabled boolean, name text
UPDATE {schema}.periodic_jobs
SET interval_s = coalesce(%(interval_s)s, interval_s),
    enabled = coalesce(%(enabled)s, enabled)
WHERE name = %(name)s
RETURNING name;

-- name: run_periodic_job
-- params: name text
-- On an autocommit connection, after make_periodic_job_due: runs that one job (unless another
-- session holds it) in a transaction of its own; NULL when it did not run.
SELECT {schema}.run_next_due_job(
    ARRAY(SELECT name FROM {schema}.periodic_jobs WHERE name <> %(name)s)) -> %(name)s AS outcome;
