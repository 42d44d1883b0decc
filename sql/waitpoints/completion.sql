-- Waitpoints: what a run can wait on (another run, a time, a token completed by hand, a batch).
-- A waiting run is WAITING: it holds no concurrency slot (slots are derived from EXECUTING rows)
-- but keeps its lease while its worker lives. Edges (run_waitpoints) are keyed by the waiting
-- run, its wait_attempt and the call position inside its handler, so a run re-executed after
-- a crash finds the same waitpoints, and through them the same children, while an attempt
-- after a failure makes its own; what a run waits on is its current attempt's edges.

-- Who wakes a waiting run, and why none is left behind (docs/concurrency.md, Waitpoints): a
-- waitpoint's completion and a run's decision to wait on it meet on the waitpoint's row (the
-- completer updates it, the waiter locks it FOR SHARE before it checks); the decision that a
-- waiting run has nothing left pending is taken under the waiting run's row lock, in a later
-- statement than the lock, so it sees every completion committed before. Locks are taken in
-- the global order: runs being finished, then their waitpoints, then the waiting runs (runs by
-- descending id, waitpoints by id).

-- function: complete_run_waitpoint
-- Fires when a run that somebody waits on reaches a final status, in the transaction that
-- finishes it, whatever finished it (worker, expiry, cancel, crash, sweeper). It announces the
-- run on the finished channel (wait_for_run from outside a handler listens there), completes
-- the run's waitpoint now and leaves the waiting runs to the end of the statement
-- (wake_after_statement): one statement may finish children of many parents, in any order,
-- and the parents must be locked in id order, once. Runs nobody waits on are not announced:
-- the trigger fires only for has_waiters.
CREATE OR REPLACE FUNCTION {schema}.complete_run_waitpoint()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    completed bigint;
    queue_name text := 'fairlane_wake.' || {schema_name};
BEGIN
    PERFORM pg_notify({finished_channel}, NEW.id::text);
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
CREATE TRIGGER runs_complete_waitpoints
AFTER UPDATE OF status ON {schema}.runs
FOR EACH ROW
WHEN (NEW.has_waiters
      AND NEW.status = ANY({schema}.final_statuses())
      AND NOT OLD.status = ANY({schema}.final_statuses()))
EXECUTE FUNCTION {schema}.complete_run_waitpoint();

-- function: wake_listed_waitpoints
-- Empty a transaction-local list of completed waitpoints (a setting holding their ids, comma
-- separated) and wake the runs waiting on them: the statement trigger below and the tokens'
-- commit trigger (sql/waitpoints/tokens.sql) each keep a list of their own. Costs one setting
-- read when the list is empty.
CREATE OR REPLACE FUNCTION {schema}.wake_listed_waitpoints(list_name text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    pending text := current_setting(list_name, true);
BEGIN
    IF pending IS NULL OR pending = '' THEN
        RETURN;
    END IF;
    PERFORM set_config(list_name, '', true);
    PERFORM {schema}.wake_waiting_runs(string_to_array(pending, ',')::bigint[]);
END;
$$;

-- function: wake_after_statement
-- After a statement that changed run statuses: wake the runs waiting on the waitpoints its
-- rows completed (complete_run_waitpoint).
CREATE OR REPLACE FUNCTION {schema}.wake_after_statement()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM {schema}.wake_listed_waitpoints('fairlane_wake.' || {schema_name});
    RETURN NULL;
END;
$$;

-- trigger: runs_wake_waiters
CREATE TRIGGER runs_wake_waiters
AFTER UPDATE OF status ON {schema}.runs
FOR EACH STATEMENT
EXECUTE FUNCTION {schema}.wake_after_statement();

-- function: wake_waiting_runs
-- Runs waiting on these (just completed, by this transaction) waitpoints that have nothing
-- else pending become ready to resume; their workers are told on the resume channel. The
-- waiting runs are locked first, in descending id order; the check is the next statement, so
-- it sees whatever another completer committed before it let go of a run.
-- The runs are found from the completed waitpoints' edges: left to price a long list of
-- waitpoints against tables it has no statistics of (autovacuum off, or not run yet), the
-- planner read every edge and merge-joined them with every WAITING run, sorted, at each
-- completion (100,000 waiting runs woken 5,000 at a time: 170 ms of each 500 ms,
-- bench/sittings/35-resuming-waits.md). A list of run ids lets it probe the primary key (or
-- walk the index of held runs while that is small).
CREATE OR REPLACE FUNCTION {schema}.wake_waiting_runs(completed bigint[])
RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    waiting bigint[];
BEGIN
    SELECT array_agg(locked.id) INTO waiting
    FROM (SELECT r.id FROM {schema}.runs r
          WHERE r.id = ANY(ARRAY(SELECT edge.run_id FROM {schema}.run_waitpoints AS edge
                                 WHERE edge.waitpoint_id = ANY(completed)))
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
-- Of these waiting runs, which the caller has locked, the ones with nothing pending (in the
-- edges of their current attempt) are marked ready to resume. A run whose worker still holds
-- it (a short wait kept in memory, lease_token set) is announced on the resume channel; a run
-- that let go of its worker (detach_waiting_run: no lease) is QUEUED again, marked by
-- resume_ready so that its claim counts no attempt, and its environment announced on the runs
-- channel: any worker claims it and replays its handler (sql/waitpoints/steps.sql). Its
-- queue_order is the one it was first queued with, ahead of work queued since. Returns how
-- many. plpgsql, which keeps its plan: every completion that wakes a waiting run calls it. The
-- plan is made once per session, whoever calls first (the sweeper's repair, with sequential
-- scans allowed, on a table of a few runs): it finds the runs by primary key all the same.
CREATE OR REPLACE FUNCTION {schema}.mark_runs_ready(locked bigint[])
RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    marked integer;
BEGIN
    WITH ready AS (
        UPDATE {schema}.runs AS r
        SET resume_ready = true,
            status = CASE WHEN r.lease_token IS NULL THEN 'QUEUED' ELSE r.status END
        WHERE r.id = ANY(locked)
          AND r.status = 'WAITING'
          AND NOT r.resume_ready
          AND NOT EXISTS (
              SELECT 1
              FROM {schema}.run_waitpoints AS edge
              JOIN {schema}.waitpoints AS w ON w.id = edge.waitpoint_id
              WHERE edge.run_id = r.id AND edge.attempt = r.wait_attempt AND w.status = 'PENDING')
        RETURNING r.id, r.environment, r.status
    ), held AS (
        SELECT count(pg_notify({resume_channel}, ready.id::text)) AS n
        FROM ready WHERE ready.status = 'WAITING'
    ), woken AS (
        SELECT count(pg_notify({channel}, envs.environment)) AS n
        FROM (SELECT DISTINCT ready.environment FROM ready WHERE ready.status = 'QUEUED') AS envs
    )
    SELECT (SELECT count(*) FROM ready)::integer INTO marked
    FROM held, woken WHERE held.n + woken.n >= 0;
    RETURN marked;
END;
$$;
