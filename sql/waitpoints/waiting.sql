-- Statements behind RunContext.trigger_and_wait and friends, run in one transaction each.

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
           CASE WHEN a.status = ANY({schema}.final_statuses()) THEN 'COMPLETED' ELSE 'PENDING' END,
           CASE WHEN a.status = ANY({schema}.final_statuses()) THEN now() END,
           a.status = ANY({schema}.final_statuses()) AND a.status <> 'COMPLETED',
           CASE WHEN a.status = 'COMPLETED' THEN a.result
                WHEN a.status = ANY({schema}.final_statuses())
                THEN jsonb_build_object('status', a.status, 'error', a.error) END
    FROM awaited a
    ON CONFLICT (run_id) WHERE kind = 'RUN' DO NOTHING;
    RETURN QUERY
    SELECT w.run_id, w.id FROM {schema}.waitpoints w
    WHERE w.kind = 'RUN' AND w.run_id = ANY(run_ids);
END;
$$;

-- function: begin_waiting
-- The waiting run gives up its slot: EXECUTING -> WAITING, fenced by its lease token, unless
-- everything its attempt waits on (the edges of its wait_attempt; an earlier attempt's are
-- history) is already complete. Returns WAITING, READY or LOST. The pending waitpoints are
-- locked FOR SHARE first (a completion in flight is waited for, and one that comes later waits
-- for this transaction, whose edges it then sees), then the run itself; the check is a later
-- statement than both. Only a failure the worker writes under this lease moves wait_attempt,
-- so reading it before the run's lock reads the one the check uses.
CREATE OR REPLACE FUNCTION {schema}.begin_waiting(waiting_run bigint, token uuid)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    held boolean;
    waiting_attempt integer;
BEGIN
    SELECT r.wait_attempt INTO waiting_attempt FROM {schema}.runs r WHERE r.id = waiting_run;
    PERFORM 1
    FROM {schema}.waitpoints w
    WHERE w.id IN (SELECT edge.waitpoint_id FROM {schema}.run_waitpoints AS edge
                   WHERE edge.run_id = waiting_run AND edge.attempt = waiting_attempt)
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
        WHERE edge.run_id = waiting_run AND edge.attempt = waiting_attempt
          AND w.status = 'PENDING'
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

-- name: wait_edges_at
-- params: run_id bigint, attempt integer, position integer
-- The edges the run's attempt made at this call position: a replay of the attempt finds them,
-- a later attempt (after a failure) has its own.
SELECT edge.item, edge.waitpoint_id
FROM {schema}.run_waitpoints AS edge
WHERE edge.run_id = %(run_id)s AND edge.attempt = %(attempt)s AND edge.position = %(position)s
ORDER BY edge.item;

-- name: lock_awaited_runs
-- params: run_ids bigint[]
-- Serialises with the statement that finishes a child: either the child finishes first and its
-- waitpoint is created completed, or has_waiters is set first and the finishing trigger fires.
SELECT id FROM {schema}.runs WHERE id = ANY(%(run_ids)s::bigint[]) ORDER BY id DESC FOR UPDATE;

-- name: runs_in_environment
-- params: run_ids bigint[], environment text
-- Of the runs a handler names to wait on, the ones of its own environment: any other answers
-- as a missing run (docs/security.md).
SELECT id FROM {schema}.runs
WHERE id = ANY(%(run_ids)s::bigint[]) AND environment = %(environment)s;

-- name: ensure_run_waitpoints
-- params: run_ids bigint[]
-- After lock_awaited_runs, in the same transaction.
SELECT run_id, waitpoint_id FROM {schema}.ensure_run_waitpoints(%(run_ids)s::bigint[]);

-- name: create_time_waitpoint
-- params: at timestamp with time zone, delay_s double precision
INSERT INTO {schema}.waitpoints (kind, status, complete_after)
VALUES ('DATETIME', 'PENDING', coalesce(%(at)s::timestamptz, now() + make_interval(secs => %(delay_s)s)))
RETURNING id;

-- name: lock_waitpoints
-- params: waitpoint_ids bigint[]
-- Before a wait points edges at waitpoints: each is locked FOR SHARE, so the pruner (which
-- locks its candidates FOR UPDATE SKIP LOCKED) can neither take one nor have taken one that
-- this wait then finds missing. Returns the ones that exist.
SELECT w.id FROM {schema}.waitpoints w
WHERE w.id = ANY(%(waitpoint_ids)s::bigint[])
ORDER BY w.id
FOR SHARE;

-- name: insert_wait_edges
-- params: run_id bigint, attempt integer, position integer, items integer[],
-- params: waitpoint_ids bigint[]
INSERT INTO {schema}.run_waitpoints (run_id, attempt, position, item, waitpoint_id)
SELECT %(run_id)s, %(attempt)s, %(position)s, edge.item, edge.waitpoint_id
FROM unnest(%(items)s::integer[], %(waitpoint_ids)s::bigint[]) AS edge(item, waitpoint_id)
ON CONFLICT DO NOTHING;

-- name: begin_waiting
-- params: run_id bigint, token uuid
SELECT {schema}.begin_waiting(%(run_id)s, %(token)s);

-- name: resume_run
-- params: run_id bigint, token uuid
SELECT {schema}.resume_run(%(run_id)s, %(token)s);

-- name: wait_results
-- params: run_id bigint, attempt integer, position integer
SELECT edge.item, w.status, w.is_error, w.output, w.run_id
FROM {schema}.run_waitpoints AS edge
JOIN {schema}.waitpoints AS w ON w.id = edge.waitpoint_id
WHERE edge.run_id = %(run_id)s AND edge.attempt = %(attempt)s AND edge.position = %(position)s
ORDER BY edge.item;

-- name: run_waits_on
-- params: run_id bigint
-- What a run waits on, by call position and item: each waitpoint's kind and status, the run
-- it stands for (RUN), its due time (DATETIME), its timeout (MANUAL) and its batch (BATCH).
-- The waits of its current attempt (wait_attempt); an earlier attempt's are history.
SELECT e.position, e.item, w.id AS waitpoint_id, w.kind, w.status, w.run_id,
       w.complete_after, w.timeout_at, b.id AS batch_id
FROM {schema}.runs r
JOIN {schema}.run_waitpoints e ON e.run_id = r.id AND e.attempt = r.wait_attempt
JOIN {schema}.waitpoints w ON w.id = e.waitpoint_id
LEFT JOIN {schema}.batches b ON w.kind = 'BATCH' AND b.waitpoint_id = w.id
WHERE r.id = %(run_id)s
ORDER BY e.position, e.item;
