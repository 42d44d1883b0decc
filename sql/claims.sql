-- name: claim_runs
-- Claim up to %(limit)s runs in one statement. SKIP LOCKED lets concurrent claimers pass each
-- other; every claimed row gets a fresh lease token that all later writes must present.
-- The attempt is counted here, so a redelivery after a lapsed lease counts as one too.
WITH picked AS (
    SELECT id
    FROM {schema}.runs
    WHERE status = 'QUEUED'
      AND (%(environments)s::text[] IS NULL OR environment = ANY(%(environments)s::text[]))
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
    ORDER BY priority DESC, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.runs AS r
SET status = 'EXECUTING',
    attempts = r.attempts + 1,
    lease_token = gen_random_uuid(),
    lease_until = now() + make_interval(secs => %(lease_s)s),
    worker_id = %(worker_id)s,
    started_at = now()
FROM picked
WHERE r.id = picked.id
RETURNING r.id, r.lease_token, r.task, r.payload, r.attempts, r.max_attempts,
          r.environment, r.queue, r.metadata, r.machine, r.max_duration_s;
