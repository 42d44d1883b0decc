-- Limits, changed at run time. Environments and queues get their rows on first
-- trigger; setting a limit for one that has none yet creates it.

-- name: upsert_environment_settings
-- params: set_size_limit boolean, name text, set_limit boolean, concurrency_limit integer,
-- params: burst_factor numeric, paused boolean, size_limit integer
-- size_limit caps the runs waiting to start (QUEUED or DELAYED) across the environment's queues;
-- triggers check it in their transaction (sql/triggering/sizes.sql). NULL is unlimited.
-- A change may make queued runs claimable (unpaused, a cap raised): the environment's idle
-- workers are woken, as by a trigger, at commit. One whose claim finds nothing new costs a
-- claim; an unpaused environment's runs wait for no poll interval, and a worker's next claim
-- serves it first (the claim's start does not pass over it: sql/claim/claim.sql).
-- Setting the size limit deletes the environment's size bound (sql/triggering/sizes.sql): runs
-- admitted while it had no limit were never added to it. It first waits for the triggers that
-- hold the environment's size lock, so that none of them keeps a bound past the change.
WITH size_lock AS (
    SELECT {schema}.lock_environment_size(e.name)
    FROM {schema}.environments e
    WHERE %(set_size_limit)s AND e.name = %(name)s AND e.size_limit IS NOT NULL
), changed AS (
    INSERT INTO {schema}.environments AS e
        (name, concurrency_limit, burst_factor, paused, size_limit)
    SELECT %(name)s,
           CASE WHEN %(set_limit)s THEN %(concurrency_limit)s
                ELSE {schema}.new_environment_limit() END,
           coalesce(%(burst_factor)s, 1.0),
           coalesce(%(paused)s, false), %(size_limit)s
    WHERE (SELECT count(*) FROM size_lock) >= 0
    ON CONFLICT (name) DO UPDATE
    SET concurrency_limit = CASE WHEN %(set_limit)s THEN excluded.concurrency_limit
                                 ELSE e.concurrency_limit END,
        burst_factor = coalesce(%(burst_factor)s, e.burst_factor),
        paused = coalesce(%(paused)s, e.paused),
        size_limit = CASE WHEN %(set_size_limit)s THEN excluded.size_limit ELSE e.size_limit END
    RETURNING name, concurrency_limit, burst_factor, paused, size_limit
), bound_reset AS (
    DELETE FROM {schema}.size_bounds AS b
    WHERE %(set_size_limit)s AND b.environment = %(name)s AND b.scope = 'environment'
      AND EXISTS (SELECT 1 FROM changed)
), woken AS (
    SELECT pg_notify({channel}, c.name) FROM changed c WHERE NOT c.paused
)
SELECT name, concurrency_limit, burst_factor, paused, size_limit
FROM changed WHERE (SELECT count(*) FROM woken) >= 0;

-- name: upsert_queue_settings
-- params: environment text, name text, concurrency_limit integer, paused boolean,
-- params: size_limit integer, total_limit integer, rate_limit integer,
-- params: rate_period_s double precision, rate_burst integer, set_limit boolean,
-- params: set_size_limit boolean, set_total_limit boolean, set_rate boolean
-- total_limit caps the queue across its concurrency keys (sql/claim/keys.sql); the rate applies
-- per key (sql/claim/key_rates.sql), and is set as a whole: limit, period and burst.
-- Like an environment's change, a queue's wakes its environment's idle workers, and setting its
-- size limit deletes its size bound.
WITH changed AS (
    INSERT INTO {schema}.queues AS q
        (environment, name, concurrency_limit, paused, size_limit, total_limit, rate_limit,
         rate_period_s, rate_burst)
    VALUES (%(environment)s, %(name)s, %(concurrency_limit)s, coalesce(%(paused)s, false),
            %(size_limit)s, %(total_limit)s, %(rate_limit)s, %(rate_period_s)s, %(rate_burst)s)
    ON CONFLICT (environment, name) DO UPDATE
    SET concurrency_limit = CASE WHEN %(set_limit)s THEN excluded.concurrency_limit
                                 ELSE q.concurrency_limit END,
        paused = coalesce(%(paused)s, q.paused),
        size_limit = CASE WHEN %(set_size_limit)s THEN excluded.size_limit ELSE q.size_limit END,
        total_limit = CASE WHEN %(set_total_limit)s THEN excluded.total_limit
                           ELSE q.total_limit END,
        rate_limit = CASE WHEN %(set_rate)s THEN excluded.rate_limit ELSE q.rate_limit END,
        rate_period_s = CASE WHEN %(set_rate)s THEN excluded.rate_period_s ELSE q.rate_period_s END,
        rate_burst = CASE WHEN %(set_rate)s THEN excluded.rate_burst ELSE q.rate_burst END
    RETURNING environment, name, concurrency_limit, paused, size_limit, total_limit, rate_limit,
              rate_period_s, rate_burst
), bound_reset AS (
    -- After the row's lock, which waits for the triggers holding it as their size lock.
    DELETE FROM {schema}.size_bounds AS b
    WHERE %(set_size_limit)s AND b.environment = %(environment)s AND b.scope = 'queue'
      AND b.queue = %(name)s AND EXISTS (SELECT 1 FROM changed)
), woken AS (
    SELECT pg_notify({channel}, c.environment) FROM changed c WHERE NOT c.paused
)
SELECT environment, name, concurrency_limit, paused, size_limit, total_limit, rate_limit,
       rate_period_s, rate_burst
FROM changed WHERE (SELECT count(*) FROM woken) >= 0;

-- name: ensure_environment
-- params: name text
INSERT INTO {schema}.environments (name, concurrency_limit)
VALUES (%(name)s, {schema}.new_environment_limit()) ON CONFLICT DO NOTHING;

-- name: update_scheduler_settings
-- params: quantum integer, max_deficit integer, set_global boolean,
-- params: global_concurrency_limit integer, set_rate boolean, rate_limit_per_s double precision,
-- params: rate_burst double precision
-- A change may make runs claimable anywhere (a global cap or rate raised): every idle worker
-- is woken to look for work in every environment (the empty payload: no environment has an
-- empty name; worker/notifier.py's ANY_ENVIRONMENT), as after a reconnect of its listener.
WITH changed AS (
    UPDATE {schema}.scheduler
    SET quantum = coalesce(%(quantum)s, quantum),
        max_deficit = coalesce(%(max_deficit)s, max_deficit),
        global_concurrency_limit = CASE WHEN %(set_global)s THEN %(global_concurrency_limit)s
                                        ELSE global_concurrency_limit END,
        rate_limit_per_s = CASE WHEN %(set_rate)s THEN %(rate_limit_per_s)s
                                ELSE rate_limit_per_s END,
        rate_burst = CASE WHEN %(set_rate)s THEN %(rate_burst)s ELSE rate_burst END,
        rate_tokens = CASE WHEN %(set_rate)s
                           THEN coalesce(%(rate_burst)s, %(rate_limit_per_s)s, 0)
                           ELSE rate_tokens END,
        rate_refilled_at = CASE WHEN %(set_rate)s THEN now() ELSE rate_refilled_at END
    WHERE id = 1
    RETURNING quantum, max_deficit, global_concurrency_limit, rate_limit_per_s, rate_burst
), woken AS (
    SELECT pg_notify({channel}, '')
)
SELECT quantum, max_deficit, global_concurrency_limit, rate_limit_per_s, rate_burst
FROM changed WHERE (SELECT count(*) FROM woken) >= 0;

-- name: scheduler_settings
SELECT quantum, max_deficit, global_concurrency_limit, rate_limit_per_s, rate_burst
FROM {schema}.scheduler WHERE id = 1;

-- name: limits_table
-- params: include_carriers boolean
-- Every queue with its caps and size limits, its running, queued and delayed runs, for
-- `fairlane limits`; the batch carriers' queue (__batches__, fairlane's own) only when asked.
SELECT q.environment, q.name AS queue, e.concurrency_limit AS env_limit, e.burst_factor,
       e.paused AS env_paused, q.concurrency_limit AS queue_limit, q.paused AS queue_paused,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'EXECUTING')
           AS running,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'QUEUED'
          AND r.concurrency_key IS NULL)
       + (SELECT count(*) FROM {schema}.runs r
          WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'QUEUED'
            AND r.concurrency_key IS NOT NULL)
           AS queued,
       (SELECT count(*) FROM {schema}.runs r
        WHERE r.environment = q.environment AND r.queue = q.name AND r.status = 'DELAYED')
           AS delayed,
       e.size_limit AS env_size_limit, q.size_limit AS queue_size_limit,
       q.total_limit AS queue_total_limit, q.rate_limit AS queue_rate_limit,
       q.rate_period_s AS queue_rate_period_s, q.rate_burst AS queue_rate_burst
FROM {schema}.queues q
JOIN {schema}.environments e ON e.name = q.environment
WHERE %(include_carriers)s OR q.name <> '__batches__'
ORDER BY q.environment, q.name;

-- name: busiest_keys
-- params: environment text, queue text, most bigint
-- A queue's concurrency keys with the most running runs, then the most queued, at most
-- %(most)s of them (fairlane limits keys, the API): the executing runs through runs_held_idx,
-- the queued ones through runs_queued_key_idx (every queued keyed run of the queue is counted:
-- for people, not for a scrape each few seconds).
WITH running AS (
    SELECT r.concurrency_key AS key, count(*) AS n FROM {schema}.runs r
    WHERE r.environment = %(environment)s AND r.status = 'EXECUTING' AND r.queue = %(queue)s
      AND r.concurrency_key IS NOT NULL
    GROUP BY 1
), queued AS (
    SELECT r.concurrency_key AS key, count(*) AS n FROM {schema}.runs r
    WHERE r.environment = %(environment)s AND r.queue = %(queue)s AND r.status = 'QUEUED'
      AND r.concurrency_key IS NOT NULL
    GROUP BY 1
)
SELECT key AS concurrency_key, coalesce(running.n, 0) AS running,
       coalesce(queued.n, 0) AS queued
FROM running FULL JOIN queued USING (key)
ORDER BY 2 DESC, 3 DESC, 1
LIMIT %(most)s;
