-- The pick of a claim's round: which runs each environment gives, within every cap
-- (sql/claim/claim.sql says how a claim goes; sql/claim/round.sql calls this).

-- function: pick_runs
-- Pick up to `share` runs from each of the environments named, whose row locks the caller
-- holds (`env_limits`, `env_bursts`, `env_paused` are the rows as the locks returned them, their
-- latest versions; a paused one gives nothing), within the queue caps and the environment caps:
-- from each environment across its unpaused queues in queue_order (when the run was queued,
-- minus its priority in seconds), then id. One statement for every environment of a round:
-- slots are counted where a cap needs them, and each queue is read in the order of its queued
-- index (runs_queued_keyless_idx, or the keys' ring), so no backlog is sorted: only the few
-- rows each queue contributes are merged. `turn` is the environment's position in the arrays.
-- A queue with queued runs that have a concurrency key is picked from by pick_from_keys
-- (sql/claim/keys.sql): its limit applies per key, its total_limit across them, its keys
-- served round robin; the counts are the same slot holders, grouped by key too. A queue with a
-- rate takes no more of a key's runs (its keyless runs' too) than the key's bucket holds
-- tokens (sql/claim/key_rates.sql). The picked runs are locked (FOR UPDATE SKIP LOCKED) and
-- still QUEUED: the claim starts them later in one UPDATE (start_picked_runs), and no
-- environment is picked from twice before that (sql/claim/claim.sql).
-- Slot holders are the runs holding (or owed) a slot: EXECUTING ones, and WAITING ones whose
-- waitpoints completed, so that they resume ahead of fresh work. They are read by plain index
-- scans (the claim turns bitmap scans off): those mark the entries of runs that ended dead as
-- they pass them, so the next count skips them, where a bitmap scan marks none and fetched
-- every run the environment ended since the last vacuum, at every count
-- (bench/sittings/11-one-index-of-held-runs.md).
-- Batch carriers (queue __batches__) hold no slot of the environment's cap and are not bounded
-- by it: they only turn items into runs, and their queue has its own cap (the batch
-- concurrency), so a full environment still processes its batches and they never take its
-- runs' slots.
CREATE OR REPLACE FUNCTION {schema}.pick_runs(
    env_names text[], env_limits integer[], env_bursts numeric[], env_paused boolean[],
    share integer, only_queues text[], only_tasks text[], floor_environments text[],
    floor_queues text[], floor_orders timestamptz[], floor_ids bigint[])
RETURNS TABLE (id bigint, turn bigint, queue_order timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH env AS (
        SELECT x.name, x.env_limit, x.burst, x.turn
        FROM unnest(env_names, env_limits, env_bursts, env_paused)
             WITH ORDINALITY AS x(name, env_limit, burst, paused, turn)
        WHERE NOT x.paused
    ), env_room AS MATERIALIZED (
        -- In numeric until the least: a cap times its burst factor may pass integer. Without
        -- a cap nothing is counted (the common, fast case).
        SELECT env.name, env.env_limit, env.burst, env.turn,
               CASE WHEN env.env_limit IS NULL THEN share
                    ELSE least(share, floor(env.env_limit * env.burst) - (
                        (SELECT count(*) FROM {schema}.runs r
                         WHERE r.environment = env.name AND r.status = 'EXECUTING'
                           AND r.queue <> '__batches__')
                        + (SELECT count(*) FROM {schema}.runs r
                           WHERE r.environment = env.name AND r.status = 'WAITING'
                             AND r.resume_ready AND r.queue <> '__batches__')))::integer
               END AS room
        FROM env
    ), queue_room AS MATERIALIZED (
        -- Computed once: the walks' limits read it.
        SELECT e.turn, e.name AS environment, greatest(e.room, 0) AS env_room,
               q.name AS queue, q.name = '__batches__' AS carriers, q.concurrency_limit,
               keyed.keyed, q.key_cursor, held.key_counts, coalesce(held.keyless, 0) AS keyless,
               CASE WHEN q.name = '__batches__'
                    THEN coalesce(q.concurrency_limit, 2147483647) - coalesce(held.n, 0)
                    -- The queue's cap across keys, and its keyless runs' share of its limit
                    -- (all its runs while it has no keys).
                    ELSE least(least(coalesce(q.total_limit, 2147483647),
                                     coalesce(e.env_limit, 2147483647)) - coalesce(held.n, 0),
                               coalesce(q.concurrency_limit, 2147483647)
                                   - coalesce(held.keyless, 0))
               END AS room,
               -- A keyed queue's room across its keys, which pick_from_keys bounds one by one.
               least(coalesce(q.total_limit, 2147483647), coalesce(e.env_limit, 2147483647))
                   - coalesce(held.n, 0) AS keyed_room,
               -- The queue's rate per concurrency key, and the tokens of its keyless runs'
               -- bucket (sql/claim/key_rates.sql); without a rate, no bound and no read.
               coalesce(q.rate_period_s, 1) / q.rate_limit AS rate_per_run_s,
               coalesce(q.rate_burst, q.rate_limit) AS rate_burst,
               CASE WHEN q.rate_limit IS NULL THEN 2147483647
                    ELSE {schema}.key_rate_tokens(e.name, q.name, '',
                                                  coalesce(q.rate_period_s, 1) / q.rate_limit,
                                                  coalesce(q.rate_burst, q.rate_limit))
               END AS keyless_tokens,
               -- No floor: from the head (every queue_order is later than -infinity).
               coalesce(floor.queue_order, '-infinity') AS floor_order,
               coalesce(floor.id, 0) AS floor_id
        FROM env_room e
        JOIN {schema}.queues q ON q.environment = e.name
        -- Keyed: it has queued runs with a concurrency key (sql/claim/keys.sql). One descent
        -- of runs_queued_key_idx, which keyless runs never enter. A scalar subquery in the
        -- index's order: an EXISTS was planned as a hashed subplan, which read every keyed
        -- entry of the environment on every claim.
        CROSS JOIN LATERAL (
            SELECT q.name <> '__batches__' AND (
                       SELECT k.concurrency_key FROM {schema}.runs k
                       WHERE k.environment = e.name AND k.queue = q.name
                         AND k.status = 'QUEUED' AND k.concurrency_key IS NOT NULL
                       ORDER BY k.concurrency_key LIMIT 1) IS NOT NULL AS keyed
        ) AS keyed
        -- The queue's slot holders, by key (NULL: keyless), counted only where a cap needs
        -- them: without one nothing is counted (the common, fast case). A key's cap is the
        -- queue's concurrency_limit: keys without one take turns, uncounted. Nor are they
        -- counted where the environment's room, counted above, is the smaller whatever they
        -- are: a limit without a burst factor over 1, and no limit of the queue below it (every
        -- key's, the keyless runs' and the queue's total room is then at least the
        -- environment's). So the default setup, an environment limit and queues without their
        -- own, counts once per environment visited. Not for batch carriers, which the
        -- environment's room does not bound.
        LEFT JOIN LATERAL (
            SELECT sum(g.n)::integer AS n,
                   sum(g.n) FILTER (WHERE g.concurrency_key IS NULL)::integer AS keyless,
                   -- By key, an object: the ring looks each key it visits up in it (a
                   -- search, where an array would be walked: a claim of thousands of keys
                   -- meets thousands of holders).
                   jsonb_object_agg(g.concurrency_key, g.n)
                       FILTER (WHERE g.concurrency_key IS NOT NULL) AS key_counts
            FROM (SELECT h.concurrency_key, count(*)::integer AS n
                  FROM (SELECT r.concurrency_key FROM {schema}.runs r
                        WHERE r.environment = e.name AND r.status = 'EXECUTING'
                          AND r.queue = q.name
                        UNION ALL
                        SELECT r.concurrency_key FROM {schema}.runs r
                        WHERE r.environment = e.name AND r.status = 'WAITING'
                          AND r.resume_ready AND r.queue = q.name) AS h
                  GROUP BY h.concurrency_key) AS g
            WHERE (q.concurrency_limit IS NOT NULL OR q.total_limit IS NOT NULL
                   OR e.env_limit IS NOT NULL)
              AND NOT (e.env_limit IS NOT NULL AND e.burst <= 1 AND q.name <> '__batches__'
                       AND coalesce(q.concurrency_limit, 2147483647) >= e.env_limit
                       AND coalesce(q.total_limit, 2147483647) >= e.env_limit)
        ) AS held ON true
        LEFT JOIN unnest(floor_environments, floor_queues, floor_orders, floor_ids)
            AS floor(environment, queue, queue_order, id)
            ON floor.environment = e.name AND floor.queue = q.name
        WHERE NOT q.paused
          AND (only_queues IS NULL OR q.name = ANY(only_queues))
          -- An environment at its cap still processes its batches (carriers only).
          AND (e.room > 0 OR q.name = '__batches__')
    ), candidates AS (
        SELECT qr.turn, qr.carriers, qr.env_room, c.id, c.queue_order,
               row_number() OVER (PARTITION BY qr.turn, qr.carriers
                                  ORDER BY c.queue_order, c.id) AS nth
        FROM queue_room qr
        CROSS JOIN LATERAL (
            SELECT plain.id, plain.queue_order FROM (
                SELECT r.id, r.queue_order
                FROM {schema}.runs r
                WHERE NOT qr.keyed
                  AND r.environment = qr.environment AND r.queue = qr.queue
                  AND r.status = 'QUEUED'
                  -- A queue without keyed runs: its runs are in runs_queued_keyless_idx.
                  AND r.concurrency_key IS NULL
                  AND (r.queue_order, r.id) > (qr.floor_order, qr.floor_id)
                  -- A TTL limits the wait before a run first starts: one that lapsed is left
                  -- to expire_ttl_runs (exactly its condition, negated), never started. A
                  -- filter on the rows the index walk reads.
                  AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
                  -- The claimer's tasks: a filter on the rows the walk reads, like the TTL
                  -- (sql/claim/claim.sql says what a run of another task ahead costs).
                  AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
                ORDER BY r.queue_order, r.id
                LIMIT least(qr.room, qr.keyless_tokens,
                            CASE WHEN qr.carriers THEN share ELSE qr.env_room END)
                FOR UPDATE SKIP LOCKED) AS plain
            UNION ALL
            -- A keyed queue: round robin over its keys, each within the queue's limit.
            SELECT keyed.id, keyed.queue_order
            FROM {schema}.pick_from_keys(
                qr.environment, qr.queue, qr.concurrency_limit,
                least(qr.keyed_room, qr.env_room), qr.key_cursor, qr.key_counts, qr.keyless,
                only_tasks, qr.rate_per_run_s, qr.rate_burst, qr.keyless_tokens) AS keyed
            WHERE qr.keyed
        ) AS c
        WHERE CASE WHEN qr.keyed THEN qr.keyed_room ELSE qr.room END > 0
    ), kept AS (
        SELECT c.turn, c.id, c.queue_order,
               row_number() OVER (PARTITION BY c.turn ORDER BY c.queue_order, c.id) AS nth
        FROM candidates c
        WHERE c.carriers OR c.nth <= c.env_room
    )
    SELECT k.id, k.turn, k.queue_order
    FROM kept k
    WHERE k.nth <= share;
END;
$$;
