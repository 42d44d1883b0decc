-- The QUEUED runs of a queue, read from the two indexes that hold them: a queued run without a
-- concurrency key is in runs_queued_keyless_idx, one with a key in runs_queued_key_idx, never
-- in both (a run enters one queued index: the bulk trigger's cost is mostly index entries).
-- Statements that need every queued run of a queue, whatever its key, read both through
-- these. Each is a plain STABLE sql function returning rows, which the planner inlines into
-- the statement calling it from FROM, so each branch is planned against its index with the
-- caller's values.

-- function: next_queued_queue
-- The first (environment, queue) after (`after_environment`, `after_queue`) that holds QUEUED
-- runs, or no row: one descent of each queued index, the lesser taken. A loose index scan
-- steps through the queues holding queued runs with it, empty queues costing nothing; ('', '')
-- starts before every queue (names are never empty).
CREATE OR REPLACE FUNCTION {schema}.next_queued_queue(after_environment text, after_queue text)
RETURNS TABLE (environment text, queue text)
LANGUAGE sql
STABLE
AS $$
    SELECT n.environment, n.queue
    FROM ((SELECT r.environment, r.queue FROM {schema}.runs r
           WHERE r.status = 'QUEUED' AND r.concurrency_key IS NULL
             AND (r.environment, r.queue) > (after_environment, after_queue)
           ORDER BY r.environment, r.queue
           LIMIT 1)
          UNION ALL
          (SELECT r.environment, r.queue FROM {schema}.runs r
           WHERE r.status = 'QUEUED' AND r.concurrency_key IS NOT NULL
             AND (r.environment, r.queue) > (after_environment, after_queue)
           ORDER BY r.environment, r.queue
           LIMIT 1)) AS n
    ORDER BY n.environment, n.queue
    LIMIT 1;
$$;

-- function: queue_head_runs
-- The first `how_many` runs at a queue's head, in queue order (queue_order, then id): among its
-- keyless QUEUED runs, the first entries of their index; among its keyed ones, each key's
-- first run, which a loose scan of the key index reaches in one descent per key (a key's
-- later runs wait behind it: claims take a queue's keys in turn, each key's runs in queue
-- order, sql/claim/keys.sql). The first of them is the queue's first run in queue order. What
-- it reads grows with the queue's keys, not with their runs.
CREATE OR REPLACE FUNCTION {schema}.queue_head_runs(env text, queue_name text, how_many bigint)
RETURNS TABLE (id bigint, task text, queued_at timestamptz, queue_order timestamptz)
LANGUAGE sql
STABLE
AS $$
    WITH RECURSIVE key_heads AS (
        (SELECT r.concurrency_key, r.id, r.task, r.queued_at, r.queue_order
         FROM {schema}.runs r
         WHERE r.environment = env AND r.queue = queue_name AND r.status = 'QUEUED'
           AND r.concurrency_key IS NOT NULL
         ORDER BY r.concurrency_key, r.queue_order, r.id
         LIMIT 1)
        UNION ALL
        SELECT next.concurrency_key, next.id, next.task, next.queued_at, next.queue_order
        FROM key_heads k
        CROSS JOIN LATERAL (
            SELECT r.concurrency_key, r.id, r.task, r.queued_at, r.queue_order
            FROM {schema}.runs r
            WHERE r.environment = env AND r.queue = queue_name AND r.status = 'QUEUED'
              AND r.concurrency_key > k.concurrency_key
            ORDER BY r.concurrency_key, r.queue_order, r.id
            LIMIT 1) AS next
    )
    SELECT h.id, h.task, h.queued_at, h.queue_order
    FROM ((SELECT r.id, r.task, r.queued_at, r.queue_order FROM {schema}.runs r
           WHERE r.environment = env AND r.queue = queue_name AND r.status = 'QUEUED'
             AND r.concurrency_key IS NULL
           ORDER BY r.queue_order, r.id
           LIMIT how_many)
          UNION ALL
          SELECT k.id, k.task, k.queued_at, k.queue_order FROM key_heads k) AS h
    ORDER BY h.queue_order, h.id
    LIMIT how_many;
$$;

-- function: queued_run_of
-- A QUEUED run of environment `env` other than those in `passed` (runs a statement started but
-- still sees queued), or NULL: whether the environment has work left, the look that decides
-- its `drained` mark. The keyless index first, in its order (a scalar subquery keeps its ORDER
-- BY where EXISTS would drop it, so even a generic plan walks the index from the
-- environment's first entry); the keyed one only when that finds nothing, and only while some
-- queued run has a key at all (one descent per statement: a deployment without keys pays
-- that, not a descent per environment). One row, inlined into the caller.
CREATE OR REPLACE FUNCTION {schema}.queued_run_of(env text, passed bigint[])
RETURNS TABLE (id bigint)
LANGUAGE sql
STABLE
AS $$
    SELECT coalesce(
        (SELECT r.id FROM {schema}.runs r
         WHERE r.environment = env AND r.status = 'QUEUED' AND r.concurrency_key IS NULL
           AND r.id <> ALL(passed)
         ORDER BY r.environment, r.queue, r.queue_order, r.id
         LIMIT 1),
        CASE WHEN (SELECT true FROM {schema}.runs k
                   WHERE k.status = 'QUEUED' AND k.concurrency_key IS NOT NULL
                   LIMIT 1)
             THEN (SELECT r.id FROM {schema}.runs r
                   WHERE r.environment = env AND r.status = 'QUEUED'
                     AND r.concurrency_key IS NOT NULL AND r.id <> ALL(passed)
                   ORDER BY r.environment, r.queue, r.concurrency_key, r.queue_order, r.id
                   LIMIT 1) END);
$$;

-- function: queued_run_count
-- How many runs are QUEUED in environment `env`, in queue `queue_name` or (NULL, the default)
-- in all its queues: the depth an autoscaler reads (README, Metrics). Counted on the two
-- queued indexes, so the cost follows the queued runs, never the runs table's history; a plain
-- `count(*) ... WHERE status = 'QUEUED'` matches neither index's predicate and reads the table.
CREATE OR REPLACE FUNCTION {schema}.queued_run_count(env text, queue_name text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
STABLE
AS $$
    SELECT CASE WHEN queue_name IS NULL THEN
        (SELECT count(*) FROM {schema}.runs r
         WHERE r.environment = env AND r.status = 'QUEUED' AND r.concurrency_key IS NULL)
        + (SELECT count(*) FROM {schema}.runs r
           WHERE r.environment = env AND r.status = 'QUEUED' AND r.concurrency_key IS NOT NULL)
    ELSE
        (SELECT count(*) FROM {schema}.runs r
         WHERE r.environment = env AND r.queue = queue_name AND r.status = 'QUEUED'
           AND r.concurrency_key IS NULL)
        + (SELECT count(*) FROM {schema}.runs r
           WHERE r.environment = env AND r.queue = queue_name AND r.status = 'QUEUED'
             AND r.concurrency_key IS NOT NULL)
    END
$$;
