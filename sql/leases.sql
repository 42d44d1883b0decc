-- Every statement here is fenced: it matches id AND lease_token, so a worker whose lease
-- lapsed and was re-claimed changes nothing. Finishing a run clears its token, which also
-- fences any write that arrives after the run ended.

-- name: heartbeat_runs
-- Extend every held lease in one statement. Ids missing from the result are lost.
UPDATE {schema}.runs AS r
SET lease_until = now() + make_interval(secs => %(lease_s)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS held(id, token)
WHERE r.id = held.id
  AND r.lease_token = held.token
  AND r.status IN ('EXECUTING', 'WAITING')
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
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(results)s::text[])
     AS done(id, token, result)
WHERE r.id = done.id
  AND r.lease_token = done.token
  AND r.status = 'EXECUTING'
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
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(errors)s::text[],
            %(next_statuses)s::text[], %(retry_delays)s::float8[])
     AS failed(id, token, error, next_status, retry_delay_s)
WHERE r.id = failed.id
  AND r.lease_token = failed.token
  AND r.status = 'EXECUTING'
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
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS held(id, token)
    WHERE r.id = held.id
      AND r.lease_token = held.token
      AND r.status IN ('EXECUTING', 'WAITING')
    RETURNING r.id, r.environment
), woken AS (
    SELECT pg_notify({channel}, environment)
    FROM (SELECT DISTINCT environment FROM released) AS envs
)
SELECT id FROM released WHERE (SELECT count(*) FROM woken) >= 0;
