-- Waitpoints: what a run can wait on (another run, a time, a token completed by hand, a batch).
-- A waiting run is WAITING: it holds no concurrency slot (slots are derived from EXECUTING rows)
-- but keeps its lease while its worker lives. Edges (run_waitpoints) are keyed by the waiting
-- run and the call position inside its handler, so a run re-executed after a crash finds the
-- same waitpoints, and through them the same children.

-- function: complete_run_waitpoint
-- Fires when a run that somebody waits on reaches a final status, in the transaction that
-- finishes it, whatever finished it (worker, expiry, cancel, crash, sweeper).
CREATE OR REPLACE FUNCTION {schema}.complete_run_waitpoint()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    completed bigint[];
BEGIN
    WITH done AS (
        UPDATE {schema}.waitpoints AS w
        SET status = 'COMPLETED',
            completed_at = now(),
            is_error = NEW.status <> 'COMPLETED',
            output = CASE WHEN NEW.status = 'COMPLETED' THEN NEW.result
                          ELSE jsonb_build_object('status', NEW.status, 'error', NEW.error) END
        WHERE w.kind = 'RUN' AND w.run_id = NEW.id AND w.status = 'PENDING'
        RETURNING w.id
    )
    SELECT array_agg(id) INTO completed FROM done;
    IF completed IS NOT NULL THEN
        PERFORM {schema}.wake_waiting_runs(completed);
    END IF;
    RETURN NULL;
END;
$$;

-- trigger: runs_complete_waitpoints
CREATE OR REPLACE TRIGGER runs_complete_waitpoints
AFTER UPDATE OF status ON {schema}.runs
FOR EACH ROW
WHEN (NEW.has_waiters
      AND NEW.status IN ('COMPLETED', 'FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED', 'CANCELED',
                         'SYSTEM_FAILURE')
      AND OLD.status NOT IN ('COMPLETED', 'FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED',
                             'CANCELED', 'SYSTEM_FAILURE'))
EXECUTE FUNCTION {schema}.complete_run_waitpoint();

-- function: wake_waiting_runs
-- Runs waiting on these (just completed) waitpoints, with nothing else pending, become ready
-- to resume; their workers are told on the resume channel.
CREATE OR REPLACE FUNCTION {schema}.wake_waiting_runs(completed bigint[])
RETURNS integer
LANGUAGE sql
AS $$
WITH candidates AS (
    SELECT DISTINCT edge.run_id
    FROM {schema}.run_waitpoints AS edge
    WHERE edge.waitpoint_id = ANY(completed)
), ready AS (
    UPDATE {schema}.runs AS r
    SET resume_ready = true
    FROM candidates
    WHERE r.id = candidates.run_id
      AND r.status = 'WAITING'
      AND NOT r.resume_ready
      AND NOT EXISTS (
          SELECT 1
          FROM {schema}.run_waitpoints AS edge
          JOIN {schema}.waitpoints AS w ON w.id = edge.waitpoint_id
          WHERE edge.run_id = r.id AND w.status = 'PENDING')
    RETURNING r.id
)
SELECT count(pg_notify({resume_channel}, ready.id::text))::integer FROM ready;
$$;

-- function: begin_waiting
-- The waiting run gives up its slot: EXECUTING -> WAITING, fenced by its lease token, unless
-- everything it waits on is already complete. Returns WAITING, READY or LOST.
CREATE OR REPLACE FUNCTION {schema}.begin_waiting(waiting_run bigint, token uuid)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    held boolean;
BEGIN
    SELECT true INTO held
    FROM {schema}.runs r
    WHERE r.id = waiting_run AND r.lease_token = token AND r.status = 'EXECUTING'
    FOR UPDATE;
    IF held IS NULL THEN
        RETURN 'LOST';
    END IF;
    IF NOT EXISTS (
        SELECT 1
        FROM {schema}.run_waitpoints AS edge
        JOIN {schema}.waitpoints AS w ON w.id = edge.waitpoint_id
        WHERE edge.run_id = waiting_run AND w.status = 'PENDING'
    ) THEN
        RETURN 'READY';
    END IF;
    UPDATE {schema}.runs SET status = 'WAITING', resume_ready = false WHERE id = waiting_run;
    RETURN 'WAITING';
END;
$$;

-- function: resume_run
-- A ready run takes a slot again, ahead of fresh work (claims leave room for ready runs), under
-- the same environment lock and caps as a claim. Returns RESUMED, NO_ROOM, NOT_READY or LOST.
CREATE OR REPLACE FUNCTION {schema}.resume_run(waiting_run bigint, token uuid)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    run record;
    env record;
    global_limit integer;
BEGIN
    SELECT r.environment, r.queue, r.status, r.resume_ready INTO run
    FROM {schema}.runs r WHERE r.id = waiting_run AND r.lease_token = token;
    IF NOT FOUND OR run.status <> 'WAITING' THEN
        RETURN 'LOST';
    END IF;
    IF NOT run.resume_ready THEN
        RETURN 'NOT_READY';
    END IF;
    SELECT s.global_concurrency_limit INTO global_limit FROM {schema}.scheduler s WHERE s.id = 1;
    IF global_limit IS NOT NULL THEN
        PERFORM 1 FROM {schema}.scheduler s WHERE s.id = 1 FOR UPDATE;
    END IF;
    SELECT e.concurrency_limit, e.burst_factor INTO env
    FROM {schema}.environments e WHERE e.name = run.environment FOR UPDATE;
    IF global_limit IS NOT NULL AND (
        SELECT count(*) FROM {schema}.runs r WHERE r.status = 'EXECUTING') >= global_limit THEN
        RETURN 'NO_ROOM';
    END IF;
    -- Batch carriers (queue __batches__) take no slot under the environment's cap.
    IF env.concurrency_limit IS NOT NULL AND (
        SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = run.environment AND r.status = 'EXECUTING'
          AND r.queue <> '__batches__'
    ) >= floor(env.concurrency_limit * env.burst_factor) THEN
        RETURN 'NO_ROOM';
    END IF;
    IF (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = run.environment AND r.queue = run.queue AND r.status = 'EXECUTING')
       >= (SELECT least(coalesce(q.concurrency_limit, 2147483647),
                        coalesce(env.concurrency_limit, 2147483647))
           FROM {schema}.queues q WHERE q.environment = run.environment AND q.name = run.queue)
    THEN
        RETURN 'NO_ROOM';
    END IF;
    UPDATE {schema}.runs AS r
    SET status = 'EXECUTING', resume_ready = false
    WHERE r.id = waiting_run AND r.lease_token = token AND r.status = 'WAITING';
    RETURN 'RESUMED';
END;
$$;

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

