-- Waitpoints: what a run can wait on (another run, a time, a token completed by hand, a batch).
-- A waiting run is WAITING: it holds no concurrency slot (slots are derived from EXECUTING rows)
-- but keeps its lease while its worker lives. Edges (run_waitpoints) are keyed by the waiting
-- run and the call position inside its handler, so a run re-executed after a crash finds the
-- same waitpoints, and through them the same children.

-- Who wakes a waiting run, and why none is left behind (docs/concurrency.md, Waitpoints): a
-- waitpoint's completion and a run's decision to wait on it meet on the waitpoint's row (the
-- completer updates it, the waiter locks it FOR SHARE before it checks); the decision that a
-- waiting run has nothing left pending is taken under the waiting run's row lock, in a later
-- statement than the lock, so it sees every completion committed before. Locks are taken in
-- the global order: runs being finished, then their waitpoints, then the waiting runs (runs by
-- descending id, waitpoints by id).

-- function: complete_run_waitpoint
-- Fires when a run that somebody waits on reaches a final status, in the transaction that
-- finishes it, whatever finished it (worker, expiry, cancel, crash, sweeper). It completes the
-- run's waitpoint now and leaves the waiting runs to the end of the statement
-- (wake_after_statement): one statement may finish children of many parents, in any order,
-- and the parents must be locked in id order, once.
CREATE OR REPLACE FUNCTION {schema}.complete_run_waitpoint()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    completed bigint;
    queue_name text := 'fairlane_wake.' || {schema_name};
BEGIN
    UPDATE {schema}.waitpoints AS w
    SET status = 'COMPLETED',
        completed_at = now(),
        is_error = NEW.status <> 'COMPLETED',
        output = CASE WHEN NEW.status = 'COMPLETED' THEN NEW.result
                      ELSE jsonb_build_object('status', NEW.status, 'error', NEW.error) END
    WHERE w.kind = 'RUN' AND w.run_id = NEW.id AND w.status = 'PENDING'
    RETURNING w.id INTO completed;
    IF completed IS NOT NULL THEN
        -- A transaction-local list of completed waitpoints, read by the statement trigger.
        PERFORM set_config(queue_name, concat_ws(',', nullif(current_setting(queue_name, true), ''),
                                                 completed), true);
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

-- function: wake_after_statement
-- After a statement that changed run statuses: wake the runs waiting on the waitpoints its
-- rows completed (complete_run_waitpoint). Costs one setting read for statements that
-- completed none.
CREATE OR REPLACE FUNCTION {schema}.wake_after_statement()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    queue_name text := 'fairlane_wake.' || {schema_name};
    pending text := current_setting(queue_name, true);
BEGIN
    IF pending IS NULL OR pending = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config(queue_name, '', true);
    PERFORM {schema}.wake_waiting_runs(string_to_array(pending, ',')::bigint[]);
    RETURN NULL;
END;
$$;

-- trigger: runs_wake_waiters
CREATE OR REPLACE TRIGGER runs_wake_waiters
AFTER UPDATE OF status ON {schema}.runs
FOR EACH STATEMENT
EXECUTE FUNCTION {schema}.wake_after_statement();

-- function: wake_waiting_runs
-- Runs waiting on these (just completed, by this transaction) waitpoints that have nothing
-- else pending become ready to resume; their workers are told on the resume channel. The
-- waiting runs are locked first, in descending id order; the check is the next statement, so
-- it sees whatever another completer committed before it let go of a run.
CREATE OR REPLACE FUNCTION {schema}.wake_waiting_runs(completed bigint[])
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    waiting bigint[];
BEGIN
    SELECT array_agg(locked.id) INTO waiting
    FROM (SELECT r.id FROM {schema}.runs r
          WHERE r.id IN (SELECT edge.run_id FROM {schema}.run_waitpoints AS edge
                         WHERE edge.waitpoint_id = ANY(completed))
            AND r.status = 'WAITING' AND NOT r.resume_ready
          ORDER BY r.id DESC
          FOR UPDATE) AS locked;
    IF waiting IS NULL THEN
        RETURN 0;
    END IF;
    RETURN {schema}.mark_runs_ready(waiting);
END;
$$;

-- function: mark_runs_ready
-- Of these waiting runs, which the caller has locked, the ones with nothing pending are marked
-- ready to resume and their workers told on the resume channel. Returns how many.
CREATE OR REPLACE FUNCTION {schema}.mark_runs_ready(locked bigint[])
RETURNS integer
LANGUAGE sql
AS $$
WITH ready AS (
    UPDATE {schema}.runs AS r
    SET resume_ready = true
    WHERE r.id = ANY(locked)
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

-- function: ensure_run_waitpoints
-- The waitpoints of runs somebody is about to wait on, made lazily, already complete for a run
-- that is final. The caller holds the runs' row locks (lock_awaited_runs, or a batch's item
-- runs locked by attach_batch_runs), so a run finishing meanwhile either finished first (its
-- waitpoint is made complete here) or sees has_waiters once it gets the row, and completes it.
-- The SELECT is a later statement than the INSERT, so it also returns a waitpoint another
-- waiter made and committed before the runs were locked.
CREATE OR REPLACE FUNCTION {schema}.ensure_run_waitpoints(run_ids bigint[])
RETURNS TABLE (run_id bigint, waitpoint_id bigint)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    WITH awaited AS (
        UPDATE {schema}.runs AS r
        SET has_waiters = true
        WHERE r.id = ANY(run_ids)
        RETURNING r.id, r.status, r.result, r.error
    )
    INSERT INTO {schema}.waitpoints (kind, run_id, status, completed_at, is_error, output)
    SELECT 'RUN', a.id,
           CASE WHEN a.status IN ('COMPLETED', 'FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED',
                                  'CANCELED', 'SYSTEM_FAILURE') THEN 'COMPLETED' ELSE 'PENDING' END,
           CASE WHEN a.status IN ('COMPLETED', 'FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED',
                                  'CANCELED', 'SYSTEM_FAILURE') THEN now() END,
           a.status NOT IN ('COMPLETED', 'QUEUED', 'DELAYED', 'EXECUTING', 'WAITING'),
           CASE WHEN a.status = 'COMPLETED' THEN a.result
                WHEN a.status IN ('QUEUED', 'DELAYED', 'EXECUTING', 'WAITING') THEN NULL
                ELSE jsonb_build_object('status', a.status, 'error', a.error) END
    FROM awaited a
    ON CONFLICT (run_id) WHERE kind = 'RUN' DO NOTHING;
    RETURN QUERY
    SELECT w.run_id, w.id FROM {schema}.waitpoints w
    WHERE w.kind = 'RUN' AND w.run_id = ANY(run_ids);
END;
$$;

-- function: attach_batch_runs
-- A run waiting on a batch waits on the runs of its items too, so it resumes when every item's
-- run is final, with one result per item (edges at the item's index; the batch's own edge is at
-- item -1). Called once the batch's waitpoint is complete (finish_batch, the abort), for every
-- run waiting on it, and by a run that starts to wait on a batch that has already ended
-- (`waiter`: just that run). The batch's waitpoint row is the meeting point: the ones that
-- complete it update it before they attach, a waiter locks it FOR SHARE before it decides, so
-- either the waiter's edge is committed and seen here, or the waiter sees it complete.
CREATE OR REPLACE FUNCTION {schema}.attach_batch_runs(target bigint, waiter bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    batch_waitpoint bigint;
    item_runs bigint[];
    item_waitpoints bigint[];
    attached integer;
BEGIN
    SELECT b.waitpoint_id INTO batch_waitpoint FROM {schema}.batches b WHERE b.id = target;
    -- A waiter attaches itself only to a batch that has ended (it holds the waitpoint's row
    -- FOR SHARE, so whoever completes it waits for its commit, and then attaches it).
    IF waiter IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM {schema}.waitpoints w
        WHERE w.id = batch_waitpoint AND w.status = 'COMPLETED') THEN
        RETURN 0;
    END IF;
    IF batch_waitpoint IS NULL OR NOT EXISTS (
        SELECT 1 FROM {schema}.run_waitpoints e
        WHERE e.waitpoint_id = batch_waitpoint AND e.item = -1
          AND (waiter IS NULL OR e.run_id = waiter)) THEN
        RETURN 0;
    END IF;
    -- Locked like awaited runs (descending id), then their waitpoints found or made.
    SELECT array_agg(locked.id) INTO item_runs
    FROM (SELECT r.id FROM {schema}.runs r
          WHERE r.id IN (SELECT i.run_id FROM {schema}.batch_items i
                         WHERE i.batch_id = target AND i.run_id IS NOT NULL)
          ORDER BY r.id DESC
          FOR UPDATE) AS locked;
    IF item_runs IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(made.run_id), array_agg(made.waitpoint_id)
    INTO item_runs, item_waitpoints
    FROM {schema}.ensure_run_waitpoints(item_runs) AS made;
    INSERT INTO {schema}.run_waitpoints (run_id, position, item, waitpoint_id)
    SELECT e.run_id, e.position, i.index, made.waitpoint_id
    FROM {schema}.run_waitpoints e
    CROSS JOIN {schema}.batch_items i
    JOIN unnest(item_runs, item_waitpoints) AS made(run_id, waitpoint_id)
      ON made.run_id = i.run_id
    WHERE e.waitpoint_id = batch_waitpoint AND e.item = -1
      AND (waiter IS NULL OR e.run_id = waiter)
      AND i.batch_id = target
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS attached = ROW_COUNT;
    RETURN attached;
END;
$$;

-- function: begin_waiting
-- The waiting run gives up its slot: EXECUTING -> WAITING, fenced by its lease token, unless
-- everything it waits on is already complete. Returns WAITING, READY or LOST. The pending
-- waitpoints are locked FOR SHARE first (a completion in flight is waited for, and one that
-- comes later waits for this transaction, whose edges it then sees), then the run itself; the
-- check is a later statement than both.
CREATE OR REPLACE FUNCTION {schema}.begin_waiting(waiting_run bigint, token uuid)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    held boolean;
BEGIN
    PERFORM 1
    FROM {schema}.waitpoints w
    WHERE w.id IN (SELECT edge.waitpoint_id FROM {schema}.run_waitpoints AS edge
                   WHERE edge.run_id = waiting_run)
      AND w.status = 'PENDING'
    ORDER BY w.id
    FOR SHARE;
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

-- function: create_token
-- A token that code completes by hand. With a key, the live token that has it: the unique
-- index on live keys decides. An INSERT that meets a key another transaction is inserting
-- waits for it; the SELECT after it is a later statement, so it sees that token once
-- committed. An expired key is moved aside first (and again if it expires in between).
CREATE OR REPLACE FUNCTION {schema}.create_token(key text, key_ttl_s float8, timeout_s float8)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    made bigint;
BEGIN
    LOOP
        IF key IS NOT NULL THEN
            UPDATE {schema}.waitpoints AS w
            SET idempotency_key = NULL, inactive_idempotency_key = w.idempotency_key
            WHERE w.kind = 'MANUAL' AND w.idempotency_key = key
              AND w.idempotency_expires_at <= now();
        END IF;
        INSERT INTO {schema}.waitpoints
            (kind, status, idempotency_key, idempotency_expires_at, timeout_at)
        VALUES ('MANUAL', 'PENDING', key,
                CASE WHEN key IS NOT NULL THEN now() + make_interval(secs => key_ttl_s) END,
                CASE WHEN timeout_s IS NOT NULL THEN now() + make_interval(secs => timeout_s) END)
        ON CONFLICT (idempotency_key) WHERE kind = 'MANUAL' AND idempotency_key IS NOT NULL
        DO NOTHING
        RETURNING id INTO made;
        IF made IS NOT NULL THEN
            RETURN made;
        END IF;
        SELECT w.id INTO made FROM {schema}.waitpoints w
        WHERE w.kind = 'MANUAL' AND w.idempotency_key = key;
        IF made IS NOT NULL THEN
            RETURN made;
        END IF;
    END LOOP;
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

