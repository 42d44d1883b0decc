-- A run's recorded calls (run_steps): each ctx.step and each wait of its handler, by call
-- position, so that a replay of the handler returns what already happened instead of doing it
-- again. A replay happens when a waiting run that let go of its worker resumes, after a crash
-- (the lease lapsed) and after a retry; docs/durable-execution.md says what each keeps.

-- name: record_step
-- params: position integer, name text, attempt integer, status text, result jsonb,
-- params: error jsonb, started_at timestamp with time zone, run_id bigint, token uuid
-- A step's outcome, fenced: written only while the run is EXECUTING under this lease token
-- (the run's row is locked FOR SHARE, so a reclaim or a cancel waits for it, or it sees theirs
-- and writes nothing). Returns the position when written. A step recorded by an earlier
-- attempt is replaced only when it was asked to run again (a failed step, or per_attempt).
INSERT INTO {schema}.run_steps AS s
    (run_id, position, kind, name, attempt, status, result, error, started_at, finished_at)
SELECT r.id, %(position)s, 'STEP', %(name)s, %(attempt)s, %(status)s, %(result)s::jsonb,
       %(error)s::jsonb, %(started_at)s, now()
FROM (SELECT r.id FROM {schema}.runs r
      WHERE r.id = %(run_id)s AND r.lease_token = %(token)s AND r.status = 'EXECUTING'
      FOR SHARE) AS r
ON CONFLICT (run_id, position) DO UPDATE
SET kind = 'STEP', name = EXCLUDED.name, attempt = EXCLUDED.attempt, status = EXCLUDED.status,
    result = EXCLUDED.result, error = EXCLUDED.error, started_at = EXCLUDED.started_at,
    finished_at = EXCLUDED.finished_at
RETURNING s.position;

-- name: record_wait
-- params: run_id bigint, position integer, name text, attempt integer
-- A wait at this position, in the wait's own transaction (fenced there by begin_waiting). A
-- later attempt that makes the wait again records its attempt and a new start.
INSERT INTO {schema}.run_steps AS s (run_id, position, kind, name, attempt, status)
VALUES (%(run_id)s, %(position)s, 'WAIT', %(name)s, %(attempt)s, 'WAITING')
ON CONFLICT (run_id, position) DO UPDATE
SET name = EXCLUDED.name, attempt = EXCLUDED.attempt, status = 'WAITING', result = NULL,
    error = NULL, started_at = now(), finished_at = NULL
WHERE s.attempt <> EXCLUDED.attempt;

-- function: recorded_calls
-- Everything the runs recorded, by run and position, for their replay: a step's outcome, and
-- for a wait of the run's current wait attempt the edges' waitpoints (as wait_results reads
-- them), with whether all of them completed. When they did, the replay returns the results
-- without a statement; else it waits as the first execution did.
-- Read by primary keys only, for any number of runs: priced without statistics (autovacuum
-- off, or not run yet), a claim's thousand runs read every run and every recorded call in a
-- parallel hash join, and the estimate of that many rows had JIT compile the plan: 0.6 s a
-- claim at 100,000 waiting runs, of which 0.01 s reading (bench/sittings/35-resuming-waits.md).
-- Each run's wait attempt is looked up by its key.
CREATE OR REPLACE FUNCTION {schema}.recorded_calls(run_ids bigint[])
RETURNS TABLE (run_id bigint, "position" integer, kind text, name text, attempt integer,
               status text, result jsonb, error jsonb, results jsonb, complete boolean)
LANGUAGE plpgsql
STABLE
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT s.run_id, s.position, s.kind, s.name, s.attempt, s.status, s.result, s.error,
           waited.results, coalesce(waited.complete, false)
    FROM {schema}.run_steps AS s
    LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_array(e.item, w.is_error, w.output, w.run_id)
                         ORDER BY e.item) AS results,
               bool_and(w.status = 'COMPLETED') AS complete
        FROM {schema}.run_waitpoints AS e
        JOIN {schema}.waitpoints AS w ON w.id = e.waitpoint_id
        WHERE s.kind = 'WAIT' AND e.run_id = s.run_id
          AND e.attempt = (SELECT r.wait_attempt FROM {schema}.runs AS r WHERE r.id = s.run_id)
          AND e.position = s.position
    ) AS waited ON true
    WHERE s.run_id = ANY(run_ids)
    ORDER BY s.run_id, s.position;
END;
$$;

-- name: recorded_calls
-- params: run_ids bigint[]
SELECT run_id, position, kind, name, attempt, status, result, error, results, complete
FROM {schema}.recorded_calls(%(run_ids)s::bigint[]);

-- name: run_steps
-- params: run_id bigint
-- A run's recorded steps and waits, for its page and `fairlane runs show`. A wait is COMPLETED
-- once every waitpoint of its recorded attempt completed, at the last one's completion, and its
-- result is their outputs by item (an error's output is its error document).
SELECT s.position, s.kind, s.name, s.attempt,
       CASE WHEN s.kind = 'WAIT' AND waited.complete THEN 'COMPLETED' ELSE s.status END AS status,
       CASE WHEN s.kind = 'STEP' THEN s.result
            WHEN waited.complete THEN waited.outputs END AS result,
       s.error, s.started_at,
       CASE WHEN s.kind = 'STEP' THEN s.finished_at
            WHEN waited.complete THEN waited.last_completed END AS finished_at
FROM {schema}.run_steps AS s
LEFT JOIN LATERAL (
    SELECT bool_and(w.status = 'COMPLETED') AS complete, max(w.completed_at) AS last_completed,
           jsonb_agg(w.output ORDER BY e.item) AS outputs
    FROM {schema}.run_waitpoints AS e
    JOIN {schema}.waitpoints AS w ON w.id = e.waitpoint_id
    WHERE s.kind = 'WAIT' AND e.run_id = s.run_id AND e.attempt = s.attempt
      AND e.position = s.position
) AS waited ON true
WHERE s.run_id = %(run_id)s
ORDER BY s.position;

-- function: detach_waiting_run
-- A run that waits longer than its worker keeps it in memory lets go of its worker: no lease,
-- no heartbeat, no worker. Its handler is dropped; when its waits complete, mark_runs_ready
-- queues it again and any worker replays it. Returns DETACHED, READY (its waits completed
-- meanwhile: the worker resumes it as it holds it) or LOST. The run's row lock serialises it
-- with mark_runs_ready, which sees either the lease (and announces the run to this worker) or
-- none (and queues it).
CREATE OR REPLACE FUNCTION {schema}.detach_waiting_run(waiting_run bigint, token uuid)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    run record;
BEGIN
    SELECT r.status, r.resume_ready INTO run
    FROM {schema}.runs r WHERE r.id = waiting_run AND r.lease_token = token
    FOR UPDATE;
    IF NOT FOUND OR run.status <> 'WAITING' THEN
        RETURN 'LOST';
    END IF;
    IF run.resume_ready THEN
        RETURN 'READY';
    END IF;
    UPDATE {schema}.runs
    SET lease_token = NULL, lease_until = NULL, worker_id = NULL
    WHERE id = waiting_run;
    RETURN 'DETACHED';
END;
$$;

-- name: detach_waiting_run
-- params: run_id bigint, token uuid
SELECT {schema}.detach_waiting_run(%(run_id)s, %(token)s);
