-- Hard queue size limits: a queue, or a whole environment, holds at most `size_limit` runs that
-- wait to start (QUEUED or DELAYED). NULL is unlimited, the default. The check runs inside the
-- trigger's transaction and serialises the triggers of one limited queue, so concurrent
-- triggers cannot overshoot (the seeds' check read a cached length and could).
--
-- Locks first, counts after: each count is a later statement than the lock, and READ COMMITTED
-- gives every statement a fresh snapshot, so it sees every trigger committed before the lock
-- was granted. The locks are held until the caller's transaction ends.

-- function: lock_queue_sizes
-- Take the size-limit locks of every (envs[i], queues[i]) at once, in the global lock order
-- (docs/concurrency.md): the limited environments' advisory locks by name, then the limited
-- queues' rows by (environment, name). A caller takes them all before any other lock of its
-- own, so triggers touching the same limited queues wait for each other instead of
-- deadlocking, whatever order their requests come in.
--
-- A queue is locked through its row, which claims never lock. An environment is locked through
-- a transaction-scoped advisory lock instead of its row: claims lock environment rows (FOR
-- UPDATE), and a trigger held open in a caller's transaction must not stall the claims of its
-- environment. Returns whether any of them has a limit (false: nothing to lock or count).
CREATE OR REPLACE FUNCTION {schema}.lock_queue_sizes(envs text[], queues text[])
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    target record;
    limited boolean := false;
BEGIN
    FOR target IN
        SELECT e.name
        FROM {schema}.environments e
        WHERE e.name = ANY(envs) AND e.size_limit IS NOT NULL
        ORDER BY e.name
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext({schema_name} || '.environment_size'),
                                      hashtext(target.name));
        limited := true;
    END LOOP;
    -- One primary-key lookup per queue, in order: cheaper than one join of the arrays.
    FOR target IN
        SELECT DISTINCT a.environment, a.queue
        FROM unnest(envs, queues) AS a(environment, queue)
        ORDER BY a.environment, a.queue
    LOOP
        PERFORM 1 FROM {schema}.queues q
        WHERE q.environment = target.environment AND q.name = target.queue
          AND q.size_limit IS NOT NULL
        FOR UPDATE;
        limited := limited OR FOUND;
    END LOOP;
    RETURN limited;
END;
$$;

-- function: queue_sizes
-- The limited queues and environments among (envs[i], queues[i]) with the runs waiting in each
-- (`size`). Counting stops at limit + 1, enough to decide any trigger, and bounded; it reads the
-- queued index and the (environment, queue) index of delayed runs. Call it in a later statement
-- than lock_queue_sizes, so that it counts what the lock's previous holders committed.
CREATE OR REPLACE FUNCTION {schema}.queue_sizes(envs text[], queues text[])
RETURNS TABLE (environment text, queue text, scope text, size_limit integer, size integer)
LANGUAGE sql
STABLE
AS $$
    WITH given AS (
        SELECT DISTINCT a.environment, a.queue FROM unnest(envs, queues) AS a(environment, queue)
    )
    SELECT q.environment, q.name, 'queue', q.size_limit,
           ((SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.runs r
                 WHERE r.environment = q.environment AND r.queue = q.name
                   AND r.status = 'QUEUED'
                 LIMIT q.size_limit + 1) AS queued)
            + (SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.runs r
                 WHERE r.environment = q.environment AND r.queue = q.name
                   AND r.status = 'DELAYED'
                 LIMIT q.size_limit + 1) AS delayed))::integer
    FROM {schema}.queues q
    JOIN given ON q.environment = given.environment AND q.name = given.queue
    WHERE q.size_limit IS NOT NULL
    UNION ALL
    -- An environment's limit counts all its queues but __batches__: batch carriers only turn
    -- items into runs, and those runs are what the limit counts.
    SELECT e.name, NULL, 'environment', e.size_limit,
           ((SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.runs r
                 WHERE r.environment = e.name AND r.status = 'QUEUED'
                   AND r.queue <> '__batches__'
                 LIMIT e.size_limit + 1) AS queued)
            + (SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.runs r
                 WHERE r.environment = e.name AND r.status = 'DELAYED'
                   AND r.queue <> '__batches__'
                 LIMIT e.size_limit + 1) AS delayed))::integer
    FROM {schema}.environments e
    WHERE e.name IN (SELECT given.environment FROM given) AND e.size_limit IS NOT NULL
$$;

-- function: first_past_size_limit
-- Given `sizes` (queue_sizes' rows as a JSON array, counted under the locks) and the runs about
-- to be added, one per request (`items[i]` into queue `queues[i]` of environment `envs[i]`),
-- the first request in request order that would take a queue or its environment past its
-- limit, with the limit it passes (a queue's before its environment's). No row: all fit.
CREATE OR REPLACE FUNCTION {schema}.first_past_size_limit(
    sizes jsonb, envs text[], queues text[], items integer[])
RETURNS TABLE (environment text, queue text, size_limit integer, scope text, size integer,
               item integer)
LANGUAGE sql
STABLE
AS $$
    SELECT s.environment, coalesce(s.queue, past.queue), s.size_limit, s.scope, s.size,
           past.item
    FROM jsonb_to_recordset(sizes)
        AS s(environment text, queue text, scope text, size_limit integer, size integer)
    CROSS JOIN LATERAL (
        -- With room for n more, the (n + 1)th added run is the first that does not fit.
        SELECT added.queue, added.item
        FROM unnest(envs, queues, items) AS added(environment, queue, item)
        WHERE added.environment = s.environment
          AND (s.scope = 'environment' OR added.queue = s.queue)
        ORDER BY added.item
        OFFSET greatest(s.size_limit - s.size, 0)
        LIMIT 1
    ) AS past
    ORDER BY past.item, s.scope DESC
    LIMIT 1
$$;

-- function: check_queue_sizes
-- `adding[i]` runs are about to enter queue `queues[i]` of environment `envs[i]` (one element
-- per queue). Takes the size-limit locks (lock_queue_sizes), then returns the first limit they
-- would pass, or no row: queue limits in (environment, queue) order, then environment limits
-- over all the environment's queues.
CREATE OR REPLACE FUNCTION {schema}.check_queue_sizes(envs text[], queues text[], adding integer[])
RETURNS TABLE (environment text, queue text, size_limit integer, scope text, size integer)
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT {schema}.lock_queue_sizes(envs, queues) THEN
        RETURN;
    END IF;
    -- A later statement than the locks: it sees what their previous holders committed.
    RETURN QUERY
    SELECT s.environment, coalesce(s.queue, min(a.queue)), s.size_limit, s.scope, s.size
    FROM {schema}.queue_sizes(envs, queues) AS s
    JOIN unnest(envs, queues, adding) AS a(environment, queue, runs)
      ON a.environment = s.environment AND (s.scope = 'environment' OR a.queue = s.queue)
    GROUP BY s.environment, s.queue, s.size_limit, s.scope, s.size
    HAVING s.size + sum(a.runs) > s.size_limit
    ORDER BY s.scope DESC, s.environment, s.queue
    LIMIT 1;
END;
$$;
