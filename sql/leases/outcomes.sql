-- Every statement here is fenced: it matches id AND lease_token, so a worker whose lease
-- lapsed and was re-claimed changes nothing. Finishing a run clears its token, which also
-- fences any write that arrives after the run ended.
--
-- Each locks its runs first, in descending id order (docs/concurrency.md, the global lock
-- order): a worker's heartbeat and its outcome writer hold runs of one worker at once, a
-- cancel locks a tree children first, and a completion then locks the runs waiting on what it
-- finished; all take runs in that one order, so none of them can wait for another in a cycle.

-- name: heartbeat_runs
-- Extend every held lease in one statement. Ids missing from the result are lost.
WITH held AS (
    SELECT r.id
    FROM {schema}.runs AS r
    JOIN unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) AS lease(id, token)
      ON r.id = lease.id AND r.lease_token = lease.token
    WHERE r.status IN ('EXECUTING', 'WAITING')
    ORDER BY r.id DESC
    FOR UPDATE OF r
)
UPDATE {schema}.runs AS r
SET lease_until = now() + make_interval(secs => %(lease_s)s)
FROM held
WHERE r.id = held.id
RETURNING r.id;

-- name: complete_runs
-- A completed run keeps no error: the one an earlier attempt left (a retry, a lapsed lease) is
-- cleared.
UPDATE {schema}.runs AS r
SET status = 'COMPLETED',
    result = done.result::jsonb,
    error = NULL,
    finished_at = now(),
    lease_token = NULL,
    lease_until = NULL
FROM (SELECT r.id, lease.result
      FROM {schema}.runs AS r
      JOIN unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[])
           AS lease(id, token, result)
        ON r.id = lease.id AND r.lease_token = lease.token
      WHERE r.status = 'EXECUTING'
      ORDER BY r.id DESC
      FOR UPDATE OF r) AS done
WHERE r.id = done.id
RETURNING r.id;

-- name: fail_runs
-- The worker decides the next status (DELAYED for a retry, else a final status) because it
-- holds the attempt count the claim returned and the task's retry policy.
UPDATE {schema}.runs AS r
SET status = failed.next_status,
    error = failed.error::jsonb,
    available_at = CASE WHEN failed.next_status = 'DELAYED'
                        THEN now() + make_interval(secs => failed.retry_delay_s)
                        ELSE r.available_at END,
    finished_at = CASE WHEN failed.next_status = 'DELAYED' THEN NULL ELSE now() END,
    lease_token = NULL,
    lease_until = NULL
FROM (SELECT r.id, lease.error, lease.next_status, lease.retry_delay_s
      FROM {schema}.runs AS r
      JOIN unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(errors)b::text[],
                  %(next_statuses)b::text[], %(retry_delays)b::float8[])
           AS lease(id, token, error, next_status, retry_delay_s)
        ON r.id = lease.id AND r.lease_token = lease.token
      WHERE r.status = 'EXECUTING'
      ORDER BY r.id DESC
      FOR UPDATE OF r) AS failed
WHERE r.id = failed.id
RETURNING r.id, r.status;

-- name: release_runs
-- Give runs back without burning the attempt the claim counted (graceful shutdown), and wake
-- the other workers so they pick them up at once. The run started, so it has no TTL any more
-- (the claim disarmed it; cleared here too for runs claimed before it did).
WITH released AS (
    UPDATE {schema}.runs AS r
    SET status = 'QUEUED',
        attempts = r.attempts - 1,
        lease_token = NULL,
        lease_until = NULL,
        worker_id = NULL,
        started_at = NULL,
        expires_at = NULL,
        resume_ready = false
    FROM (SELECT r.id
          FROM {schema}.runs AS r
          JOIN unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) AS lease(id, token)
            ON r.id = lease.id AND r.lease_token = lease.token
          WHERE r.status IN ('EXECUTING', 'WAITING')
          ORDER BY r.id DESC
          FOR UPDATE OF r) AS held
    WHERE r.id = held.id
    RETURNING r.id, r.environment
), woken AS (
    SELECT pg_notify({channel}, environment)
    FROM (SELECT DISTINCT environment FROM released) AS envs
)
SELECT id FROM released WHERE (SELECT count(*) FROM woken) >= 0;
