-- Every statement here is fenced: it matches id AND lease_token, so a worker whose lease
-- lapsed and was re-claimed changes nothing. Finishing a run clears its token, which also
-- fences any write that arrives after the run ended.
--
-- Each locks its runs first, in descending id order (docs/concurrency.md, the global lock
-- order): a worker's heartbeat and its outcome writer hold runs of one worker at once, a
-- cancel locks a tree children first, and a completion then locks the runs waiting on what it
-- finished; all take runs in that one order, so none of them can wait for another in a cycle.
--
-- The leases drive each statement: sorted by id, descending, each finds its run by primary key
-- (a LATERAL subquery that locks it; OFFSET 0 keeps the planner from flattening it or pushing
-- the status check into it, where an index of statuses would be a path), and the UPDATE finds
-- the locked runs again through `id = ANY(the call's ids)`. The worker sends them on
-- connections that plan no sequential scan (fairlane.worker.worker.FENCED_WRITE_SETTINGS). So
-- a call costs what its leases cost, and locks in lease order, whatever the table held when its
-- plan was made: the join these statements made before (the runs of a status, then their
-- leases), in the plan a worker kept from its first calls on an empty table, looped over every
-- executing run for each lease once the table had grown (tests/sql/test_plans_after_growth.py).

-- name: heartbeat_runs
-- params: ids bigint[], tokens uuid[], lease_s double precision
-- Extend every held lease in one statement. Ids missing from the result are lost.
WITH held AS MATERIALIZED (
    SELECT run.id
    FROM (SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) AS lease(id, token)
          ORDER BY lease.id DESC OFFSET 0) AS lease
    CROSS JOIN LATERAL (
        SELECT r.id, r.status FROM {schema}.runs AS r
        WHERE r.id = lease.id AND r.lease_token = lease.token
        OFFSET 0 FOR UPDATE) AS run
    WHERE run.status IN ('EXECUTING', 'WAITING')
)
UPDATE {schema}.runs AS r
SET lease_until = now() + make_interval(secs => %(lease_s)s)
FROM held
WHERE r.id = held.id AND r.id = ANY(%(ids)b::bigint[])
RETURNING r.id;

-- name: complete_runs
-- params: ids bigint[], tokens uuid[], results text[]
-- A completed run keeps no error: the one an earlier attempt left (a retry, a lapsed lease) is
-- cleared.
WITH done AS MATERIALIZED (
    SELECT run.id, lease.result
    FROM (SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[])
              AS lease(id, token, result)
          ORDER BY lease.id DESC OFFSET 0) AS lease
    CROSS JOIN LATERAL (
        SELECT r.id, r.status FROM {schema}.runs AS r
        WHERE r.id = lease.id AND r.lease_token = lease.token
        OFFSET 0 FOR UPDATE) AS run
    WHERE run.status = 'EXECUTING'
      -- Before any run changes (evaluated once, first): this statement announces its runs,
      -- so the row trigger passes over them (sql/realtime/changes.sql).
      AND (SELECT set_config('fairlane.runs_announced', 'on', true)) = 'on'
), completed AS (
    UPDATE {schema}.runs AS r
    SET status = 'COMPLETED',
        result = done.result::jsonb,
        error = NULL,
        finished_at = now(),
        lease_token = NULL,
        lease_until = NULL
    FROM done
    WHERE r.id = done.id AND r.id = ANY(%(ids)b::bigint[])
    RETURNING r.id
), announced AS (
    -- For the event streams, a notice per 300 runs.
    SELECT {schema}.announce_runs(array_agg(completed.id)) FROM completed
)
SELECT id FROM completed WHERE (SELECT count(*) FROM announced) >= 0;

-- name: fail_runs
-- params: ids bigint[], tokens uuid[], errors text[], next_statuses text[],
-- params: retry_delays double precision[]
-- The worker decides the next status (DELAYED for a retry, else a final status) because it
-- holds the attempt count the claim returned and the task's retry policy. A retry starts its
-- own waits: its wait_attempt is the attempt the next claim counts.
WITH failed AS MATERIALIZED (
    SELECT run.id, lease.error, lease.next_status, lease.retry_delay_s
    FROM (SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(errors)b::text[],
                               %(next_statuses)b::text[], %(retry_delays)b::float8[])
              AS lease(id, token, error, next_status, retry_delay_s)
          ORDER BY lease.id DESC OFFSET 0) AS lease
    CROSS JOIN LATERAL (
        SELECT r.id, r.status FROM {schema}.runs AS r
        WHERE r.id = lease.id AND r.lease_token = lease.token
        OFFSET 0 FOR UPDATE) AS run
    WHERE run.status = 'EXECUTING'
)
UPDATE {schema}.runs AS r
SET status = failed.next_status,
    error = failed.error::jsonb,
    attempt_errors = {schema}.with_attempt_error(r.attempt_errors, r.attempts,
                                                 failed.error::jsonb),
    available_at = CASE WHEN failed.next_status = 'DELAYED'
                        THEN now() + make_interval(secs => failed.retry_delay_s)
                        ELSE r.available_at END,
    finished_at = CASE WHEN failed.next_status = 'DELAYED' THEN NULL ELSE now() END,
    wait_attempt = CASE WHEN failed.next_status = 'DELAYED' THEN r.attempts + 1
                        ELSE r.wait_attempt END,
    lease_token = NULL,
    lease_until = NULL
FROM failed
WHERE r.id = failed.id AND r.id = ANY(%(ids)b::bigint[])
RETURNING r.id, r.status;

-- name: release_runs
-- params: ids bigint[], tokens uuid[]
-- Give runs back without burning the attempt the claim counted (graceful shutdown), and wake
-- the other workers so they pick them up at once. The run started, so it has no TTL any more
-- (the claim disarmed it; cleared here too for runs claimed before it did).
WITH held AS MATERIALIZED (
    SELECT run.id
    FROM (SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) AS lease(id, token)
          ORDER BY lease.id DESC OFFSET 0) AS lease
    CROSS JOIN LATERAL (
        SELECT r.id, r.status FROM {schema}.runs AS r
        WHERE r.id = lease.id AND r.lease_token = lease.token
        OFFSET 0 FOR UPDATE) AS run
    WHERE run.status IN ('EXECUTING', 'WAITING')
), released AS (
    UPDATE {schema}.runs AS r
    SET status = 'QUEUED',
        attempts = r.attempts - 1,
        lease_token = NULL,
        lease_until = NULL,
        worker_id = NULL,
        started_at = NULL,
        expires_at = NULL,
        resume_ready = false
    FROM held
    WHERE r.id = held.id AND r.id = ANY(%(ids)b::bigint[])
    RETURNING r.id, r.environment
), woken AS (
    SELECT pg_notify({channel}, environment)
    FROM (SELECT DISTINCT environment FROM released) AS envs
)
SELECT id FROM released WHERE (SELECT count(*) FROM woken) >= 0;
