-- Hard queue size limits: a queue, or a whole environment, holds at most `size_limit` runs that
-- wait to start (QUEUED or DELAYED). NULL is unlimited, the default. The check runs inside the
-- trigger's transaction and serialises the triggers of one limited queue, so concurrent
-- triggers cannot overshoot (the seeds' check read a cached length and could).
--
-- Locks first, counts after: each count is a later statement than the lock, and READ COMMITTED
-- gives every statement a fresh snapshot, so it sees every trigger committed before the lock
-- was granted. The locks are held until the caller's transaction ends.

-- function: lock_environment_size
-- An environment's size lock: a transaction-scoped advisory lock by its name (lock order 4,
-- docs/concurrency.md). Taken by triggers into a limited environment (lock_queue_sizes) and by
-- a change of its size limit (sql/limits/limits.sql), which must exclude the same triggers.
CREATE OR REPLACE FUNCTION {schema}.lock_environment_size(env text)
RETURNS void
LANGUAGE sql
AS $$
    SELECT pg_advisory_xact_lock(hashtext({schema_name} || '.environment_size'), hashtext(env))
$$;

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
        PERFORM {schema}.lock_environment_size(target.name);
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
-- The limited queues and environments among (envs[i], queues[i]), each with the size to decide
-- adding[i] more runs by, and the bound to keep after (record_size_bounds). Call it in a later
-- statement than lock_queue_sizes, so that what it reads is what the lock's previous holders
-- committed.
--
-- A bound (size_bounds) is at least the runs waiting there: the runs waiting or held
-- (EXECUTING or WAITING, which may come back to wait without a trigger: a retry, a lapsed
-- lease, a released wait) when it was last counted, plus every run admitted since, which
-- record_size_bounds adds under the same lock. Nothing it counted is ever taken off, so it stays
-- a bound whatever leaves in between. Where the bound and the call's runs fit under the limit,
-- the size is the bound and nothing is counted: a deep queue far from its limit costs a trigger
-- one lookup. Otherwise (no bound, or near the limit) the runs waiting are counted as before,
-- up to limit + 1, on the queued index and the (environment, queue) index of delayed runs, and
-- the size is exact; the runs held are then counted too, up to the room the call leaves, for
-- the next bound (`bound`; NULL when they do not fit: none is kept, so the next trigger counts).
CREATE OR REPLACE FUNCTION {schema}.queue_sizes(envs text[], queues text[], adding integer[])
RETURNS TABLE (environment text, queue text, scope text, size_limit integer, size integer,
               bound bigint)
LANGUAGE sql
STABLE
AS $$
    WITH given AS (
        SELECT a.environment, a.queue, sum(a.runs)::integer AS runs
        FROM unnest(envs, queues, adding) AS a(environment, queue, runs)
        GROUP BY a.environment, a.queue
    ), limited AS (
        SELECT q.environment, q.name AS queue, 'queue' AS scope, q.size_limit, given.runs
        FROM {schema}.queues q
        JOIN given ON q.environment = given.environment AND q.name = given.queue
        WHERE q.size_limit IS NOT NULL
        UNION ALL
        SELECT e.name, NULL, 'environment', e.size_limit, sum(given.runs)::integer
        FROM {schema}.environments e
        JOIN given ON given.environment = e.name
        WHERE e.size_limit IS NOT NULL
        GROUP BY e.name, e.size_limit
    )
    SELECT l.environment, l.queue, l.scope, l.size_limit,
           coalesce(kept.bound, counted.waiting)::integer,
           coalesce(kept.bound,
                    CASE WHEN counted.held <= l.size_limit - counted.waiting - l.runs
                         THEN counted.waiting + counted.held END)
    FROM limited l
    LEFT JOIN {schema}.size_bounds kept
        ON kept.environment = l.environment AND kept.scope = l.scope
       AND kept.queue = coalesce(l.queue, '') AND kept.bound + l.runs <= l.size_limit
    LEFT JOIN LATERAL (
        SELECT w.waiting,
               {schema}.held_runs(l.environment, l.queue,
                                  greatest(l.size_limit - w.waiting - l.runs, 0) + 1) AS held
        FROM (SELECT {schema}.waiting_runs(l.environment, l.queue, l.size_limit) AS waiting) w
        WHERE kept.bound IS NULL
        -- Planned on its own, so that the condition gates the counts (a one-time filter):
        -- pulled up into the join, it filtered their result after they ran.
        OFFSET 0
    ) counted ON true
$$;

-- function: waiting_runs
-- The runs waiting to start (QUEUED or DELAYED) in queue `queue_name` of `env`, or with a NULL
-- queue in all the environment's queues but __batches__ (batch carriers only turn items into
-- runs, and those runs are what a limit counts): each status counted up to `size_limit` + 1,
-- enough to decide any trigger. The queued runs are counted on the two queued indexes (a run is
-- in runs_queued_keyless_idx or in runs_queued_key_idx, never both), the delayed ones on their
-- (environment, queue) index. In plpgsql, which keeps its plans for the session: a function in
-- SQL with subqueries is never inlined, and was planned again at every trigger that counted
-- (sql/maintenance/settings.sql says what that cost).
CREATE OR REPLACE FUNCTION {schema}.waiting_runs(env text, queue_name text, size_limit integer)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF queue_name IS NOT NULL THEN
        RETURN
            (SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.runs r
                 WHERE r.environment = env AND r.queue = queue_name AND r.status = 'QUEUED'
                   AND r.concurrency_key IS NULL
                 LIMIT size_limit + 1) AS keyless)
            + (SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.runs r
                 WHERE r.environment = env AND r.queue = queue_name AND r.status = 'QUEUED'
                   AND r.concurrency_key IS NOT NULL
                 LIMIT size_limit + 1) AS keyed)
            + (SELECT count(*) FROM (
                 SELECT 1 FROM {schema}.runs r
                 WHERE r.environment = env AND r.queue = queue_name AND r.status = 'DELAYED'
                 LIMIT size_limit + 1) AS delayed);
    END IF;
    RETURN
        (SELECT count(*) FROM (
             SELECT 1 FROM {schema}.runs r
             WHERE r.environment = env AND r.status = 'QUEUED' AND r.queue <> '__batches__'
               AND r.concurrency_key IS NULL
             LIMIT size_limit + 1) AS keyless)
        + (SELECT count(*) FROM (
             SELECT 1 FROM {schema}.runs r
             WHERE r.environment = env AND r.status = 'QUEUED' AND r.queue <> '__batches__'
               AND r.concurrency_key IS NOT NULL
             LIMIT size_limit + 1) AS keyed)
        + (SELECT count(*) FROM (
             SELECT 1 FROM {schema}.runs r
             WHERE r.environment = env AND r.status = 'DELAYED' AND r.queue <> '__batches__'
             LIMIT size_limit + 1) AS delayed);
END;
$$;

-- function: held_runs
-- The runs held (EXECUTING or WAITING) in queue `queue_name` of `env`, or with a NULL queue in
-- all the environment's queues but __batches__, counted up to `up_to`: one range of
-- runs_held_idx (environment, status, queue) per status, which stops there. In plpgsql, like
-- waiting_runs.
CREATE OR REPLACE FUNCTION {schema}.held_runs(env text, queue_name text, up_to bigint)
RETURNS bigint
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF queue_name IS NOT NULL THEN
        RETURN (SELECT count(*) FROM (
                    SELECT 1 FROM {schema}.runs r
                    WHERE r.environment = env AND r.status IN ('EXECUTING', 'WAITING')
                      AND r.queue = queue_name
                    LIMIT up_to) AS held);
    END IF;
    RETURN (SELECT count(*) FROM (
                SELECT 1 FROM {schema}.runs r
                WHERE r.environment = env AND r.status IN ('EXECUTING', 'WAITING')
                  AND r.queue <> '__batches__'
                LIMIT up_to) AS held);
END;
$$;

-- function: limits_and_additions
-- The rows each limit of a call is decided on, to be grouped by (environment, scope,
-- queue_key): the limits of `sizes` (queue_sizes' rows as a JSON array; `limited`), and each
-- of `amounts[i]` (runs, or a request's number) added into queue `queues[i]` of environment
-- `envs[i]` twice, under its queue and under its environment. Grouping, not a join: joined, a
-- call into many limited queues of one environment compared every limit with every queue (a
-- thousand queues: a million comparisons a statement). Inlined into its callers.
CREATE OR REPLACE FUNCTION {schema}.limits_and_additions(
    sizes jsonb, envs text[], queues text[], amounts integer[])
RETURNS TABLE (environment text, scope text, queue_key text, limited boolean, queue text,
               size_limit integer, size integer, bound bigint, amount integer,
               added_queue text)
LANGUAGE sql
STABLE
AS $$
    SELECT s.environment, s.scope, coalesce(s.queue, ''), true, s.queue, s.size_limit, s.size,
           s.bound, NULL::integer, NULL::text
    FROM jsonb_to_recordset(coalesce(sizes, '[]'))
        AS s(environment text, queue text, scope text, size_limit integer, size integer,
             bound bigint)
    UNION ALL
    SELECT a.environment, 'queue', a.queue, false, NULL, NULL, NULL, NULL, a.amount, a.queue
    FROM unnest(envs, queues, amounts) AS a(environment, queue, amount)
    UNION ALL
    SELECT a.environment, 'environment', '', false, NULL, NULL, NULL, NULL, a.amount, a.queue
    FROM unnest(envs, queues, amounts) AS a(environment, queue, amount)
$$;

-- function: record_size_bounds
-- After a call admitted its runs (`added[i]` into queue `queues[i]` of environment `envs[i]`),
-- under the same size locks: each bound queue_sizes gave (`sizes`, its rows as a JSON array)
-- plus the runs the call added under it is kept; a limit without one (its runs held did not
-- fit) has its old bound deleted. Rows in key order, like every lock of the call. In plpgsql,
-- like waiting_runs: every admitted trigger into a limited queue makes this call.
CREATE OR REPLACE FUNCTION {schema}.record_size_bounds(
    sizes jsonb, envs text[], queues text[], added integer[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- The runs added under each bound (limits_and_additions says why by grouping).
    WITH targets AS (
        SELECT u.environment, u.scope, u.queue_key AS queue, max(u.bound) AS bound,
               coalesce(sum(u.amount), 0) AS runs
        FROM {schema}.limits_and_additions(sizes, envs, queues, added) AS u
        GROUP BY u.environment, u.scope, u.queue_key
        HAVING bool_or(u.limited)
    ), kept AS (
        INSERT INTO {schema}.size_bounds AS b (environment, scope, queue, bound)
        SELECT t.environment, t.scope, t.queue, t.bound + t.runs
        FROM targets t WHERE t.bound IS NOT NULL
        ORDER BY 1, 2, 3
        ON CONFLICT (environment, scope, queue) DO UPDATE SET bound = excluded.bound
    )
    DELETE FROM {schema}.size_bounds AS b
    USING targets t
    WHERE t.bound IS NULL
      AND b.environment = t.environment AND b.scope = t.scope AND b.queue = t.queue;
END;
$$;

-- function: first_past_size_limit
-- Given `sizes` (queue_sizes' rows as a JSON array, counted under the locks) and the runs about
-- to be added, one per request (`items[i]` into queue `queues[i]` of environment `envs[i]`),
-- the first request in request order that would take a queue or its environment past its
-- limit, with the limit it passes (a queue's before its environment's). No row: all fit.
-- Each limit gathers the requests under it by grouping (limits_and_additions), in request
-- order, and with room for n more the (n + 1)th of them is the first that does not fit.
CREATE OR REPLACE FUNCTION {schema}.first_past_size_limit(
    sizes jsonb, envs text[], queues text[], items integer[])
RETURNS TABLE (environment text, queue text, size_limit integer, scope text, size integer,
               item integer)
LANGUAGE sql
STABLE
AS $$
    SELECT g.environment, coalesce(g.queue, g.past_queue), g.size_limit, g.scope, g.size,
           g.past_item
    FROM (SELECT u.environment, u.scope, max(u.queue) AS queue, max(u.size_limit) AS size_limit,
                 max(u.size) AS size,
                 (array_agg(u.amount ORDER BY u.amount) FILTER (WHERE NOT u.limited))
                     [greatest(max(u.size_limit) - max(u.size), 0) + 1] AS past_item,
                 (array_agg(u.added_queue ORDER BY u.amount) FILTER (WHERE NOT u.limited))
                     [greatest(max(u.size_limit) - max(u.size), 0) + 1] AS past_queue
          FROM {schema}.limits_and_additions(sizes, envs, queues, items) AS u
          GROUP BY u.environment, u.scope, u.queue_key
          HAVING bool_or(u.limited)) AS g
    WHERE g.past_item IS NOT NULL
    ORDER BY g.past_item, g.scope DESC
    LIMIT 1
$$;

-- function: check_queue_sizes
-- `adding[i]` runs are about to enter queue `queues[i]` of environment `envs[i]` (one element
-- per queue). Takes the size-limit locks (lock_queue_sizes), then returns the first limit they
-- would pass, or no row: queue limits in (environment, queue) order, then environment limits
-- over all the environment's queues. With no row, the runs are admitted: the caller must add
-- them in the same transaction, and their bounds already count them (record_size_bounds).
CREATE OR REPLACE FUNCTION {schema}.check_queue_sizes(envs text[], queues text[], adding integer[])
RETURNS TABLE (environment text, queue text, size_limit integer, scope text, size integer)
LANGUAGE plpgsql
AS $$
DECLARE
    sizes jsonb;
BEGIN
    IF NOT {schema}.lock_queue_sizes(envs, queues) THEN
        RETURN;
    END IF;
    -- A later statement than the locks: it sees what their previous holders committed.
    SELECT jsonb_agg(s) INTO sizes FROM {schema}.queue_sizes(envs, queues, adding) AS s;
    -- Each limit with the runs added under it (limits_and_additions says why by grouping).
    RETURN QUERY
    SELECT u.environment,
           CASE WHEN u.scope = 'queue' THEN u.queue_key ELSE min(u.added_queue) END,
           max(u.size_limit), u.scope, max(u.size)
    FROM {schema}.limits_and_additions(sizes, envs, queues, adding) AS u
    GROUP BY u.environment, u.scope, u.queue_key
    HAVING bool_or(u.limited) AND max(u.size) + sum(u.amount) > max(u.size_limit)
    ORDER BY u.scope DESC, u.environment, u.queue_key
    LIMIT 1;
    IF NOT FOUND AND sizes IS NOT NULL THEN
        PERFORM {schema}.record_size_bounds(sizes, envs, queues, adding);
    END IF;
END;
$$;
