-- Hard queue size limits: a queue, or a whole environment, holds at most `size_limit` runs that
-- wait to start (QUEUED or DELAYED). NULL is unlimited, the default. The check runs inside the
-- trigger's transaction and serialises the triggers of one limited queue, so concurrent
-- triggers cannot overshoot (the seeds' check read a cached length and could).

-- function: check_queue_sizes
-- `adding[i]` runs are about to enter queue `queues[i]` of environment `envs[i]` (one element
-- per queue). Returns the first limit they would pass, or no row. Locks first, counts after:
-- each count is a later statement than the lock, and READ COMMITTED gives every statement of a
-- volatile function a fresh snapshot, so it sees every trigger committed before the lock was
-- granted. The locks are held until the caller's transaction ends.
--
-- Locks are taken in one global order (environments, then queues, each by name), so triggers
-- wait for each other instead of deadlocking. A queue is locked through its row, which claims
-- never lock. An environment is locked through a transaction-scoped advisory lock instead of
-- its row: claims lock environment rows (FOR UPDATE), and a trigger held open in a caller's
-- transaction must not stall the claims of its environment.
CREATE OR REPLACE FUNCTION {schema}.check_queue_sizes(envs text[], queues text[], adding integer[])
RETURNS TABLE (environment text, queue text, size_limit integer, scope text, size integer)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    target record;
    waiting integer;
BEGIN
    FOR target IN
        SELECT DISTINCT e.name
        FROM {schema}.environments e
        WHERE e.name = ANY(envs) AND e.size_limit IS NOT NULL
        ORDER BY e.name
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext({schema_name} || '.environment_size'),
                                      hashtext(target.name));
    END LOOP;
    FOR target IN
        SELECT q.environment, q.name
        FROM {schema}.queues q
        JOIN unnest(envs, queues) AS a(environment, queue)
          ON q.environment = a.environment AND q.name = a.queue
        WHERE q.size_limit IS NOT NULL
        ORDER BY q.environment, q.name
    LOOP
        PERFORM 1 FROM {schema}.queues q
        WHERE q.environment = target.environment AND q.name = target.name
        FOR UPDATE;
    END LOOP;

    -- Queue limits. Counting stops at limit + 1: enough to decide, and bounded.
    FOR target IN
        SELECT a.environment, a.queue, a.runs, q.size_limit
        FROM unnest(envs, queues, adding) AS a(environment, queue, runs)
        JOIN {schema}.queues q ON q.environment = a.environment AND q.name = a.queue
        WHERE q.size_limit IS NOT NULL
        ORDER BY a.environment, a.queue
    LOOP
        SELECT (SELECT count(*) FROM (
                    SELECT 1 FROM {schema}.runs r
                    WHERE r.environment = target.environment AND r.queue = target.queue
                      AND r.status = 'QUEUED'
                    LIMIT target.size_limit + 1) AS queued)
             + (SELECT count(*) FROM (
                    SELECT 1 FROM {schema}.runs r
                    WHERE r.environment = target.environment AND r.queue = target.queue
                      AND r.status = 'DELAYED'
                    LIMIT target.size_limit + 1) AS delayed)
        INTO waiting;
        IF waiting + target.runs > target.size_limit THEN
            RETURN QUERY SELECT target.environment, target.queue, target.size_limit,
                                'queue'::text, waiting;
            RETURN;
        END IF;
    END LOOP;

    -- Environment limits, over all the environment's queues but __batches__: batch carriers
    -- only turn items into runs, and those runs are what the limit counts.
    FOR target IN
        SELECT a.environment, min(a.queue) AS queue, sum(a.runs)::integer AS runs, e.size_limit
        FROM unnest(envs, queues, adding) AS a(environment, queue, runs)
        JOIN {schema}.environments e ON e.name = a.environment
        WHERE e.size_limit IS NOT NULL
        GROUP BY a.environment, e.size_limit
        ORDER BY a.environment
    LOOP
        SELECT (SELECT count(*) FROM (
                    SELECT 1 FROM {schema}.runs r
                    WHERE r.environment = target.environment AND r.status = 'QUEUED'
                      AND r.queue <> '__batches__'
                    LIMIT target.size_limit + 1) AS queued)
             + (SELECT count(*) FROM (
                    SELECT 1 FROM {schema}.runs r
                    WHERE r.environment = target.environment AND r.status = 'DELAYED'
                      AND r.queue <> '__batches__'
                    LIMIT target.size_limit + 1) AS delayed)
        INTO waiting;
        IF waiting + target.runs > target.size_limit THEN
            RETURN QUERY SELECT target.environment, target.queue, target.size_limit,
                                'environment'::text, waiting;
            RETURN;
        END IF;
    END LOOP;
END;
$$;
