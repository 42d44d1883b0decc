-- function: sweep_concurrency
-- Slots are derived from EXECUTING rows, so the accounting cannot drift by itself; what can go
-- wrong is a row that claims a slot with no live lease behind it (written by hand, restored
-- from a backup, or a lease pushed beyond max_lease_s). Such runs go back to QUEUED (CRASHED on
-- their last attempt). Environments marked drained that do have queued runs are corrected too,
-- so the fair scheduler treats them as active, and (unless sweep_repair_waiting is off)
-- waiting runs missed by a wake-up are woken (repair_waiting_runs), counted as
-- waiting_repaired.
CREATE OR REPLACE FUNCTION {schema}.sweep_concurrency()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    max_lease_s double precision := {schema}.numeric_setting('max_lease_s', 86400);
    repaired integer;
    woken integer;
    environments_fixed integer;
    waiting_repaired integer := 0;
BEGIN
    WITH orphaned AS (
        SELECT r.id, jsonb_build_object(
                   'type', 'SlotReconciled', 'code', 'SLOT_RECONCILED',
                   'message', 'EXECUTING without a live lease; returned by the concurrency sweeper'
               ) AS error
        FROM {schema}.runs r
        WHERE r.status = 'EXECUTING'
          AND (r.lease_token IS NULL OR r.lease_until IS NULL
               OR r.lease_until > now() + make_interval(secs => max_lease_s))
        FOR UPDATE SKIP LOCKED
    ), repaired_runs AS (
        UPDATE {schema}.runs AS r
        SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'CRASHED' ELSE 'QUEUED' END,
            finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
            error = orphaned.error,
            attempt_errors = {schema}.with_attempt_error(r.attempt_errors, r.attempts,
                                                         orphaned.error),
            lease_token = NULL,
            lease_until = NULL,
            worker_id = NULL
        FROM orphaned
        WHERE r.id = orphaned.id
        RETURNING r.environment, r.status
    ), notified AS (
        SELECT pg_notify({channel}, environment)
        FROM (SELECT DISTINCT environment FROM repaired_runs WHERE status = 'QUEUED') AS envs
    )
    SELECT count(*), (SELECT count(*) FROM notified) INTO repaired, woken FROM repaired_runs;

    -- SKIP LOCKED: a claim holding the row decides its drained mark itself (and this job
    -- already holds runs, which the global lock order puts after environment rows).
    UPDATE {schema}.environments AS e
    SET drained = false
    FROM (SELECT x.name FROM {schema}.environments x
          WHERE x.drained
            AND (SELECT q.id FROM {schema}.queued_run_of(x.name, ARRAY[]::bigint[]) AS q)
                IS NOT NULL
          FOR UPDATE SKIP LOCKED) AS stale
    WHERE e.name = stale.name;
    GET DIAGNOSTICS environments_fixed = ROW_COUNT;
    IF {schema}.boolean_setting('sweep_repair_waiting', true) THEN
        waiting_repaired := {schema}.repair_waiting_runs();
    END IF;
    RETURN jsonb_build_object('repaired_runs', repaired, 'environments_fixed', environments_fixed,
                              'waiting_repaired', waiting_repaired);
END;
$$;

-- function: repair_waiting_runs
-- Defence in depth: a WAITING run with nothing pending that is not marked ready was missed by
-- the completions that should have woken it (the waitpoint functions take locks so that this
-- cannot happen; a run edited by hand can still look like it). It is marked ready and its
-- worker told, as a completion would; the count is the sweeper's `waiting_repaired`. Locked
-- first (SKIP LOCKED: a run someone holds is being decided now), checked in a later statement.
CREATE OR REPLACE FUNCTION {schema}.repair_waiting_runs()
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    stuck bigint[];
BEGIN
    SELECT array_agg(l.id) INTO stuck
    FROM (SELECT r.id FROM {schema}.runs r
          WHERE r.status = 'WAITING' AND NOT r.resume_ready
            AND NOT EXISTS (SELECT 1 FROM {schema}.run_waitpoints AS edge
                            JOIN {schema}.waitpoints AS w ON w.id = edge.waitpoint_id
                            WHERE edge.run_id = r.id AND edge.attempt = r.wait_attempt
                              AND w.status = 'PENDING')
          ORDER BY r.id
          FOR UPDATE SKIP LOCKED) AS l;
    IF stuck IS NULL THEN
        RETURN 0;
    END IF;
    RETURN {schema}.mark_runs_ready(stuck);
END;
$$;
