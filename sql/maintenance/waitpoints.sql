-- Periodic job: time waitpoints that are due complete, tokens past their timeout complete with
-- an error.

-- function: complete_due_waitpoints
-- Time waitpoints that are due complete; tokens past their timeout complete with an error.
CREATE OR REPLACE FUNCTION {schema}.complete_due_waitpoints()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    completed bigint[];
    woken integer := 0;
BEGIN
    WITH due AS (
        SELECT w.id
        FROM {schema}.waitpoints w
        WHERE w.status = 'PENDING' AND w.kind IN ('DATETIME', 'MANUAL')
          AND coalesce(w.complete_after, w.timeout_at) <= now()
        ORDER BY coalesce(w.complete_after, w.timeout_at)
        LIMIT 1000
        FOR UPDATE SKIP LOCKED
    ), done AS (
        UPDATE {schema}.waitpoints AS w
        SET status = 'COMPLETED',
            completed_at = now(),
            is_error = w.kind = 'MANUAL',
            output = CASE WHEN w.kind = 'MANUAL'
                          THEN jsonb_build_object('code', 'WAITPOINT_TIMEOUT',
                                                  'message', 'token timed out')
                          END
        FROM due
        WHERE w.id = due.id
        RETURNING w.id
    )
    SELECT array_agg(id) INTO completed FROM done;
    IF completed IS NOT NULL THEN
        woken := {schema}.wake_waiting_runs(completed);
    END IF;
    RETURN jsonb_build_object('completed', coalesce(cardinality(completed), 0), 'woken', woken);
END;
$$;
