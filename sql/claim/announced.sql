-- The pickup's claim: a run a notification announced, on an otherwise idle system
-- (sql/claim/claim.sql says how a claim goes in general).

-- function: claim_announced
-- claim_runs' first step when a notification named one environment, and no environment is
-- active. The general claim would then lock that environment (it is drained: it joins), pick
-- from it with the whole claim as its share (so no lap), find the turn order empty, start
-- what it picked and charge it: six statements, four of them in nested calls, whose fixed
-- costs are most of a pickup's claim (bench/sittings/46-the-pickup-s-claim-in-one-statement.md).
-- This does the same in two: the environment's lock, then one statement that counts, picks,
-- starts (start_picked_runs) and charges, where its queues need no more than the
-- environment's cap: none of the queues it walks has a cap, a total limit, a rate or queued
-- runs with a concurrency key, and its batch carriers have none queued. The counts and each
-- queue's walk are pick_runs' for that case (tests/sql/test_claim_announced.py checks that
-- both claims leave the same rows).
-- It returns no row, and changes nothing but the row locks it took, when the case does not
-- hold (the environment is active, paused, held by another claim, or other environments are
-- active; a queue needs counting) or nothing was picked: claim_runs then goes the general way,
-- which decides as it always did (it marks the environment active when its runs are left for
-- others, for instance).
-- The lock is taken in a statement before the counts, which therefore see every claim that
-- committed before it was granted, as pick_runs' do. The charge is the general claim's with
-- no active environment to level with or to cap the credit by: the service it got, and
-- drained when it gave less than the claim asked and has no other queued run (the runs
-- started are still QUEUED to this statement's snapshot, so they are passed over by id). A run
-- queued after that snapshot has its own notification, which makes the next claim look.
CREATE OR REPLACE FUNCTION {schema}.claim_announced(
    environment_name text, claim_limit integer, lease_s double precision, claimer text,
    only_environments text[], only_queues text[], only_tasks text[],
    floor_environments text[], floor_queues text[], floor_orders timestamptz[],
    floor_ids bigint[])
RETURNS TABLE (id bigint, lease_token uuid, task text, payload jsonb, attempts integer,
               max_attempts integer, environment text, queue text, metadata jsonb,
               machine text, max_duration_s double precision, queue_order timestamptz,
               wait_attempt integer, replay boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    env_limit integer;
    burst numeric;
BEGIN
    SELECT e.concurrency_limit, e.burst_factor INTO env_limit, burst
    FROM {schema}.environments e
    WHERE e.name = environment_name AND e.drained AND NOT e.paused
      AND (only_environments IS NULL OR e.name = ANY(only_environments))
      -- The turn order is empty (claim_turns' condition): one probe of environments_turn_idx.
      AND NOT EXISTS (SELECT 1 FROM {schema}.environments a
                      WHERE NOT a.drained AND NOT a.paused
                        AND (only_environments IS NULL OR a.name = ANY(only_environments)))
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH room AS MATERIALIZED (
        -- pick_runs' room of the environment under its cap (a burst factor included).
        SELECT CASE WHEN env_limit IS NULL THEN claim_limit
                    ELSE least(claim_limit, floor(env_limit * burst) - (
                        (SELECT count(*) FROM {schema}.runs r
                         WHERE r.environment = environment_name AND r.status = 'EXECUTING'
                           AND r.queue <> '__batches__')
                        + (SELECT count(*) FROM {schema}.runs r
                           WHERE r.environment = environment_name AND r.status = 'WAITING'
                             AND r.resume_ready AND r.queue <> '__batches__')))::integer
               END AS n
    ), walked AS MATERIALIZED (
        -- The queues pick_runs would walk; whether one needs counting of its own (its test of
        -- a keyed queue is one descent of runs_queued_key_idx); and what the environment's cap
        -- leaves it: pick_runs bounds a queue by the cap less the queue's own slot holders.
        SELECT q.name, coalesce(floor.queue_order, '-infinity') AS floor_order,
               coalesce(floor.id, 0) AS floor_id,
               CASE WHEN q.name = '__batches__'
                    THEN (SELECT b.id FROM {schema}.runs b
                          WHERE b.environment = q.environment AND b.queue = q.name
                            AND b.status = 'QUEUED'
                          ORDER BY b.queue_order, b.id LIMIT 1) IS NOT NULL
                    ELSE q.concurrency_limit IS NOT NULL OR q.total_limit IS NOT NULL
                         OR q.rate_limit IS NOT NULL
                         OR (SELECT k.concurrency_key FROM {schema}.runs k
                             WHERE k.environment = q.environment AND k.queue = q.name
                               AND k.status = 'QUEUED' AND k.concurrency_key IS NOT NULL
                             ORDER BY k.concurrency_key LIMIT 1) IS NOT NULL
               END AS counted,
               CASE WHEN env_limit IS NULL THEN claim_limit
                    ELSE env_limit - (
                        (SELECT count(*) FROM {schema}.runs r
                         WHERE r.environment = q.environment AND r.status = 'EXECUTING'
                           AND r.queue = q.name)
                        + (SELECT count(*) FROM {schema}.runs r
                           WHERE r.environment = q.environment AND r.status = 'WAITING'
                             AND r.resume_ready AND r.queue = q.name))::integer
               END AS room
        FROM {schema}.queues q
        LEFT JOIN unnest(floor_environments, floor_queues, floor_orders, floor_ids)
            AS floor(environment, queue, queue_order, id)
            ON floor.environment = q.environment AND floor.queue = q.name
        WHERE q.environment = environment_name
          AND NOT q.paused AND (only_queues IS NULL OR q.name = ANY(only_queues))
    ), picked AS MATERIALIZED (
        SELECT c.id, c.queue_order
        FROM walked w
        CROSS JOIN LATERAL (
            SELECT r.id, r.queue_order
            FROM {schema}.runs r
            WHERE r.environment = environment_name AND r.queue = w.name
              AND r.status = 'QUEUED'
              AND (r.queue_order, r.id) > (w.floor_order, w.floor_id)
              AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
              AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
            ORDER BY r.queue_order, r.id
            LIMIT greatest(least(w.room, (SELECT room.n FROM room)), 0)
            FOR UPDATE SKIP LOCKED) AS c
        WHERE w.name <> '__batches__'
          AND NOT EXISTS (SELECT 1 FROM walked counted WHERE counted.counted)
        ORDER BY c.queue_order, c.id
        LIMIT greatest((SELECT room.n FROM room), 0)
    ), started AS MATERIALIZED (
        SELECT s.*
        FROM {schema}.start_picked_runs(
            ARRAY(SELECT p.id FROM picked p ORDER BY p.queue_order, p.id), lease_s, claimer) AS s
        WHERE EXISTS (SELECT 1 FROM picked)
    ), charged AS (
        UPDATE {schema}.environments AS e
        SET served = e.served + (SELECT count(*) FROM started),
            last_served_at = clock_timestamp(),
            drained = NOT ((SELECT count(*) FROM started) >= claim_limit
                           OR (SELECT r.id FROM {schema}.runs r
                               WHERE r.environment = e.name AND r.status = 'QUEUED'
                                 AND r.id NOT IN (SELECT s.id FROM started s)
                               ORDER BY r.environment, r.queue, r.queue_order, r.id
                               LIMIT 1) IS NOT NULL)
        WHERE e.name = environment_name AND EXISTS (SELECT 1 FROM started)
        RETURNING e.name
    )
    SELECT s.id, s.lease_token, s.task, s.payload, s.attempts, s.max_attempts, s.environment,
           s.queue, s.metadata, s.machine, s.max_duration_s, s.queue_order, s.wait_attempt,
           s.replay
    FROM started s
    -- The charge is made though no row of it is returned.
    WHERE (SELECT count(*) FROM charged) >= 0
    ORDER BY s.queue_order, s.id;
END;
$$;
