-- Function bodies as they were before migration 0005 (waitpoints), which its downgrade
-- restores. Frozen: never edit these to follow later changes.

-- name: restore_claim_from_environment_0004
-- Claim up to `take` runs of one environment whose row lock the caller holds: priority first,
-- then age, across its unpaused queues, within the queue caps and the environment cap.
CREATE OR REPLACE FUNCTION {schema}.claim_from_environment(
    env_name text, take integer, lease_s double precision, claimer text, only_queues text[])
RETURNS TABLE (id bigint, lease_token uuid, task text, payload jsonb, attempts integer,
               max_attempts integer, environment text, queue text, metadata jsonb,
               machine text, max_duration_s double precision)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    env record;
    env_room integer;
BEGIN
    SELECT e.concurrency_limit, e.burst_factor INTO env
    FROM {schema}.environments e WHERE e.name = env_name;
    env_room := take;
    IF env.concurrency_limit IS NOT NULL THEN
        SELECT least(take, floor(env.concurrency_limit * env.burst_factor)::integer - count(*))
        INTO env_room
        FROM {schema}.runs r
        WHERE r.environment = env_name AND r.status = 'EXECUTING';
    END IF;
    IF env_room <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH running AS (
        SELECT r.queue, count(*)::integer AS n
        FROM {schema}.runs r
        WHERE r.environment = env_name AND r.status = 'EXECUTING'
        GROUP BY r.queue
    ), queue_room AS (
        SELECT q.name,
               least(coalesce(q.concurrency_limit, 2147483647),
                     coalesce(env.concurrency_limit, 2147483647)) - coalesce(running.n, 0) AS room
        FROM {schema}.queues q
        LEFT JOIN running ON running.queue = q.name
        WHERE q.environment = env_name
          AND NOT q.paused
          AND (only_queues IS NULL OR q.name = ANY(only_queues))
    ), picked AS (
        SELECT candidate.id
        FROM queue_room
        CROSS JOIN LATERAL (
            SELECT r.id, r.priority
            FROM {schema}.runs r
            WHERE r.environment = env_name AND r.queue = queue_room.name AND r.status = 'QUEUED'
            ORDER BY r.priority DESC, r.id
            LIMIT least(queue_room.room, env_room)
            FOR UPDATE SKIP LOCKED
        ) AS candidate
        WHERE queue_room.room > 0
        ORDER BY candidate.priority DESC, candidate.id
        LIMIT env_room
    )
    UPDATE {schema}.runs AS r
    SET status = 'EXECUTING',
        attempts = r.attempts + 1,
        lease_token = gen_random_uuid(),
        lease_until = now() + make_interval(secs => lease_s),
        worker_id = claimer,
        started_at = now()
    FROM picked
    WHERE r.id = picked.id
    RETURNING r.id, r.lease_token, r.task, r.payload, r.attempts, r.max_attempts,
              r.environment, r.queue, r.metadata, r.machine, r.max_duration_s;
END;
$$;

-- name: restore_reclaim_expired_leases_0004
-- A run whose lease lapsed goes back to QUEUED; the claim already counted its attempt, so on
-- the last attempt it ends CRASHED instead. The stale owner stays fenced: its token is cleared.
CREATE OR REPLACE FUNCTION {schema}.reclaim_expired_leases(batch_size integer DEFAULT 1000)
RETURNS jsonb
LANGUAGE sql
AS $$
WITH expired AS (
    SELECT id
    FROM {schema}.runs
    WHERE status = 'EXECUTING' AND lease_until < now()
    ORDER BY lease_until
    LIMIT batch_size
    FOR UPDATE SKIP LOCKED
), reclaimed AS (
    UPDATE {schema}.runs AS r
    SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'CRASHED' ELSE 'QUEUED' END,
        finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
        error = jsonb_build_object(
            'type', 'LeaseExpired',
            'code', 'LEASE_EXPIRED',
            'message', 'lease of worker ' || coalesce(r.worker_id, '?') || ' lapsed during attempt '
                       || r.attempts),
        lease_token = NULL,
        lease_until = NULL,
        worker_id = NULL
    FROM expired
    WHERE r.id = expired.id
    RETURNING r.status, r.environment
), woken AS (
    SELECT pg_notify({channel}, environment)
    FROM (SELECT DISTINCT environment FROM reclaimed WHERE status = 'QUEUED') AS envs
)
SELECT jsonb_build_object(
    'requeued', count(*) FILTER (WHERE status = 'QUEUED'),
    'crashed', count(*) FILTER (WHERE status = 'CRASHED'),
    'woken', (SELECT count(*) FROM woken))
FROM reclaimed;
$$;
