-- function: sweep_concurrency
-- Slots are derived from EXECUTING rows, so the accounting cannot drift by itself; what can go
-- wrong is a row that claims a slot with no live lease behind it (written by hand, restored
-- from a backup, or a lease pushed beyond max_lease_s). Such runs go back to QUEUED (CRASHED on
-- their last attempt). Environments marked drained that do have queued runs are corrected too,
-- so the fair scheduler treats them as active.
CREATE OR REPLACE FUNCTION {schema}.sweep_concurrency()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    max_lease_s double precision := {schema}.numeric_setting('max_lease_s', 86400);
    repaired integer;
    woken integer;
    environments_fixed integer;
BEGIN
    WITH orphaned AS (
        SELECT r.id
        FROM {schema}.runs r
        WHERE r.status = 'EXECUTING'
          AND (r.lease_token IS NULL OR r.lease_until IS NULL
               OR r.lease_until > now() + make_interval(secs => max_lease_s))
        FOR UPDATE SKIP LOCKED
    ), repaired_runs AS (
        UPDATE {schema}.runs AS r
        SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'CRASHED' ELSE 'QUEUED' END,
            finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
            error = jsonb_build_object(
                'type', 'SlotReconciled', 'code', 'SLOT_RECONCILED',
                'message', 'EXECUTING without a live lease; returned by the concurrency sweeper'),
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

    UPDATE {schema}.environments AS e
    SET drained = false
    WHERE e.drained
      AND (SELECT r.id FROM {schema}.runs r
           WHERE r.environment = e.name AND r.status = 'QUEUED'
           ORDER BY r.environment, r.queue, r.queue_order, r.id
           LIMIT 1) IS NOT NULL;
    GET DIAGNOSTICS environments_fixed = ROW_COUNT;
    RETURN jsonb_build_object('repaired_runs', repaired, 'environments_fixed', environments_fixed);
END;
$$;

