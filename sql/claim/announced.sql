-- The pickup's claim: a run a notification announced, on an otherwise idle system
-- (sql/claim/claim.sql says how a claim goes in general).

-- function: claim_announced
-- claim_runs' first step when a notification named one environment, and no environment is
-- active. The general claim would then lock that environment (it is drained: it joins), pick
-- from it with the whole claim as its share (so no lap), find the turn order empty, start
-- what it picked and charge it: six statements, four of them in nested calls, whose fixed
-- costs are most of a pickup's claim (bench/sittings/46-the-pickup-s-claim-in-one-statement.md).
-- This does the same in two: the environment's lock, then one statement that picks
-- (pick_runs: every cap, key, rate and filter), starts (start_picked_runs) and charges.
-- It returns no row, and changes nothing but the row lock it took, when the case does not
-- hold (the environment is active, paused or held by another claim, or other environments are
-- active) or nothing was picked: claim_runs then goes the general way, which decides as it
-- always did (it marks the environment active when its runs are left for others, for
-- instance).
-- The lock is taken in a statement before pick_runs counts, which therefore sees every claim
-- that committed before it was granted, as in the general claim. The charge is the general
-- claim's with no active environment to level with or to cap the credit by: the service it
-- got, and drained when it gave less than the claim asked and has no other queued run (the
-- runs started are still QUEUED to this statement's snapshot, so they are passed over by id).
-- A run queued after that snapshot has its own notification, which makes the next claim look.
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
    WITH picked AS MATERIALIZED (
        SELECT p.id, p.queue_order
        FROM {schema}.pick_runs(ARRAY[environment_name], ARRAY[env_limit], ARRAY[burst],
                                ARRAY[false], claim_limit, only_queues, only_tasks,
                                floor_environments, floor_queues, floor_orders, floor_ids) AS p
    ), started AS MATERIALIZED (
        SELECT s.*
        FROM {schema}.start_picked_runs(
            ARRAY(SELECT p.id FROM picked p ORDER BY p.queue_order, p.id), lease_s, claimer) AS s
        WHERE EXISTS (SELECT 1 FROM picked)
    ), charged AS (
        -- The started ids reach queued_run_of as a column, not as ARRAY(SELECT ...): an
        -- argument with a subquery keeps the planner from inlining the function, which
        -- PostgreSQL before 18 then plans anew at every call (a third of the pickup's claim).
        UPDATE {schema}.environments AS e
        SET served = e.served + run.taken,
            last_served_at = clock_timestamp(),
            drained = NOT (run.taken >= claim_limit
                           OR (SELECT q.id FROM {schema}.queued_run_of(e.name, run.ids) AS q)
                              IS NOT NULL)
        FROM (SELECT count(*) AS taken, array_agg(s.id) AS ids FROM started s) AS run
        WHERE e.name = environment_name AND run.taken > 0
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
