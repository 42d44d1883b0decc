-- Trigger requests: the JSON parameter of the trigger statements, read as rows, and the
-- statements themselves (plain requests here, keyed ones in keyed.sql).

-- function: check_trigger_request
-- The tenant boundary of every trigger (docs/security.md): a request may name only a parent run
-- of its own environment, and neither a task under `fairlane.` nor the queue `__batches__`,
-- which are the engine's (its batch carriers are inserted by ingest_batch_items, never through
-- a request). A parent of another environment is refused exactly like one that does not exist
-- (FLT01, the run id as DETAIL); a reserved name with FLT02 (the option as DETAIL). Returns
-- true, or raises. STABLE, so trigger_requests, which calls it, is still inlined.
CREATE OR REPLACE FUNCTION {schema}.check_trigger_request(
    env text, queue_name text, task_name text, parent bigint)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF starts_with(task_name, 'fairlane.') THEN
        RAISE EXCEPTION USING ERRCODE = 'FLT02', DETAIL = 'task',
            MESSAGE = 'task names under "fairlane." are reserved for the engine';
    END IF;
    IF queue_name = '__batches__' THEN
        RAISE EXCEPTION USING ERRCODE = 'FLT02', DETAIL = 'queue',
            MESSAGE = 'the queue __batches__ is reserved for batch processing';
    END IF;
    IF parent IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM {schema}.runs r WHERE r.id = parent AND r.environment = env) THEN
        RAISE EXCEPTION USING ERRCODE = 'FLT01', DETAIL = parent::text,
            MESSAGE = 'run ' || parent || ' does not exist';
    END IF;
    RETURN true;
END;
$$;

-- function: trigger_requests
-- The trigger statements' parameter as rows in request order: one JSON object per request,
-- with the fields fairlane.triggering.request names and payload, tags and metadata as JSON; an
-- option the request did not give is left out (NULL here). The client leaves out what is at
-- its default too: the environment and queue 'default' and priority 0 are filled in here, a
-- missing payload stays NULL (the JSON null the statements store for it). The one place that
-- gives those fields their SQL types. A plain STABLE sql function, so the planner inlines it
-- into the statements that read it. Every request passes the tenant boundary here
-- (check_trigger_request), the one place every trigger statement reads its requests through;
-- most name no parent and an ordinary task and queue, which costs them three comparisons.
CREATE OR REPLACE FUNCTION {schema}.trigger_requests(requests jsonb)
RETURNS TABLE (environment text, queue text, task text, payload jsonb, priority integer,
               max_attempts integer, delay_s float8, delay_until timestamptz, tags jsonb,
               metadata jsonb, machine text, max_duration_s float8, ttl_s float8,
               parent_run_id bigint, idempotency_key text, idempotency_ttl_s float8,
               debounce_key text, debounce_delay_s float8, debounce_trailing boolean,
               debounce_max_delay_s float8, concurrency_key text, ord bigint)
LANGUAGE sql
STABLE
AS $$
    SELECT coalesce(r.environment, 'default'), coalesce(r.queue, 'default'), r.task, r.payload,
           coalesce(r.priority, 0), r.max_attempts, r.delay_s, r.delay_until, r.tags,
           r.metadata, r.machine, r.max_duration_s, r.ttl_s, r.parent_run_id,
           r.idempotency_key, r.idempotency_ttl_s, r.debounce_key, r.debounce_delay_s,
           r.debounce_trailing, r.debounce_max_delay_s, r.concurrency_key, r.ordinality
    FROM ROWS FROM (jsonb_to_recordset(requests) AS (
            environment text, queue text, task text, payload jsonb, priority integer,
            max_attempts integer, delay_s float8, delay_until timestamptz, tags jsonb,
            metadata jsonb, machine text, max_duration_s float8, ttl_s float8,
            parent_run_id bigint, idempotency_key text, idempotency_ttl_s float8,
            debounce_key text, debounce_delay_s float8, debounce_trailing boolean,
            debounce_max_delay_s float8, concurrency_key text)) WITH ORDINALITY AS r
    WHERE (r.parent_run_id IS NULL AND NOT starts_with(r.task, 'fairlane.')
           AND r.queue IS DISTINCT FROM '__batches__')
       OR {schema}.check_trigger_request(
              coalesce(r.environment, 'default'), r.queue, r.task, r.parent_run_id)
$$;

-- function: insert_runs
-- Any number of runs in one statement: the parameter is a JSON array with one object per run
-- (fairlane.trigger), read as a recordset, so a bulk trigger is one round trip and one value.
-- Delays use the database clock, not the caller's.
-- Environments and queues get their settings rows on first use; ON CONFLICT DO NOTHING neither
-- writes nor waits when the row exists, even while a claimer holds its lock. It does wait for
-- another trigger inserting the same new row, as for a lock: rows are inserted in name order.
-- Options a request did not give (NULL) take the runs table's defaults.
-- This is the path of requests without idempotency keys or debounce (trigger_keyed_runs has
-- the others). Where a queue or environment has a size limit, check_queue_sizes locks and
-- counts before any row is inserted; a rejection inserts nothing and comes back as one row
-- with a NULL id, so the caller's transaction stays usable. Without limits it is not called.
-- A plpgsql function, so that the statement is planned once per session, on a generic plan from
-- the first call (its plan does not depend on the requests): called as a statement, it was
-- planned anew for each of a connection's first ten calls or so (psycopg prepares it at the
-- sixth, PostgreSQL tries five custom plans before its generic one), and for every call on a
-- connection that prepares nothing (behind a transaction-pooling PgBouncer).
CREATE OR REPLACE FUNCTION {schema}.insert_runs(requests jsonb)
RETURNS TABLE (id bigint, ids bigint[], outcome text, environment text, queue text,
               size_limit integer, scope text, size integer, item integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH max_ttl AS (
        -- Always one row, NULL when the setting is absent.
        SELECT (SELECT (value #>> '{{}}')::float8 FROM {schema}.settings
                WHERE name = 'max_ttl_s') AS seconds
    ), t AS (
        SELECT r.*,
               CASE WHEN r.delay_until > now() THEN r.delay_until
                    WHEN r.delay_s > 0 THEN now() + make_interval(secs => r.delay_s)
               END AS start_at,
               -- The configured maximum fills a missing TTL and caps a larger one (least() skips
               -- NULLs: without a maximum this is the request's own).
               least(coalesce(r.ttl_s, max_ttl.seconds), max_ttl.seconds) AS ttl
        FROM {schema}.trigger_requests(requests) AS r
        CROSS JOIN max_ttl
    ), queues_added AS (
        -- One row per queue of the call, read once from the requests: the settings rows, the size
        -- limits and the wake-ups each read these few rows, not every request again.
        SELECT environment, queue, count(*)::integer AS runs, bool_or(start_at IS NULL) AS queued
        FROM t GROUP BY 1, 2
    ), new_environments AS (
        INSERT INTO {schema}.environments (name, concurrency_limit)
        SELECT DISTINCT environment, (SELECT {schema}.new_environment_limit())
        FROM queues_added ORDER BY 1
        ON CONFLICT DO NOTHING
    ), new_queues AS (
        INSERT INTO {schema}.queues (environment, name)
        SELECT environment, queue FROM queues_added ORDER BY 1, 2
        ON CONFLICT DO NOTHING
    ), limited AS (
        -- Runs added per queue, where the queue or its environment has a size limit: two
        -- primary-key lookups per queue of the call. Joined instead, the environments table was
        -- read whole on every trigger once it was large (the planner expects a hundred requests
        -- from the JSON): with 20,000 environments a one-run trigger took four times as long.
        SELECT added.environment, added.queue, added.runs
        FROM queues_added AS added
        WHERE (SELECT e.size_limit FROM {schema}.environments e
               WHERE e.name = added.environment) IS NOT NULL
           OR (SELECT q.size_limit FROM {schema}.queues q
               WHERE q.environment = added.environment AND q.name = added.queue) IS NOT NULL
    ), rejected AS (
        SELECT full_queue.*
        FROM (SELECT array_agg(environment) AS envs, array_agg(queue) AS queues,
                     array_agg(runs) AS runs
              FROM limited HAVING count(*) > 0) AS batch
        CROSS JOIN LATERAL {schema}.check_queue_sizes(batch.envs, batch.queues, batch.runs)
            AS full_queue
    ), inserted AS (
        INSERT INTO {schema}.runs
            (environment, queue, task, payload, status, priority, max_attempts, available_at,
             tags, metadata, machine, max_duration_s, ttl_s, expires_at, parent_run_id,
             concurrency_key)
        SELECT t.environment,
               t.queue,
               t.task,
               coalesce(t.payload, 'null'),
               CASE WHEN t.start_at IS NOT NULL THEN 'DELAYED' ELSE 'QUEUED' END,
               t.priority,
               coalesce(t.max_attempts, 3),
               t.start_at,
               -- Most runs have no tags: no subquery for them.
               CASE WHEN t.tags IS NULL THEN '{{}}'::text[]
                    ELSE ARRAY(SELECT jsonb_array_elements_text(t.tags)) END,
               coalesce(t.metadata, '{{}}'),
               t.machine,
               t.max_duration_s,
               t.ttl,
               -- Armed now only when the run is enqueued now; a delayed run arms it when promoted.
               CASE WHEN t.start_at IS NULL AND t.ttl IS NOT NULL
                    THEN now() + make_interval(secs => t.ttl) END,
               t.parent_run_id,
               t.concurrency_key
        FROM t
        WHERE NOT EXISTS (SELECT 1 FROM rejected)
        ORDER BY t.ord
        RETURNING id
    ), woken AS (
        -- Idle workers of each environment with new claimable runs wake up; delivered at commit.
        SELECT pg_notify({channel}, envs.environment)
        FROM (SELECT DISTINCT environment FROM queues_added WHERE queued) AS envs
        WHERE NOT EXISTS (SELECT 1 FROM rejected)
    )
    -- The runs made come back as one array in request order (their ids follow it), one row rather
    -- than a row per run for the client to read.
    SELECT NULL::bigint AS id, made.ids, 'created'::text AS outcome, NULL::text AS environment,
           NULL::text AS queue, NULL::integer AS size_limit, NULL::text AS scope,
           NULL::integer AS size, NULL::integer AS item
    FROM (SELECT array_agg(id ORDER BY id) AS ids FROM inserted HAVING count(*) > 0) AS made
    WHERE (SELECT count(*) FROM woken) >= 0
    UNION ALL
    SELECT NULL, NULL, NULL, environment, queue, size_limit, scope, size, NULL FROM rejected;
END;
$$;

-- name: insert_runs
-- params: runs jsonb
-- Plain requests (no idempotency key, no debounce): the insert_runs function above.
SELECT id, ids, outcome, environment, queue, size_limit, scope, size, item
FROM {schema}.insert_runs(%(runs)s::jsonb);

-- name: trigger_keyed_runs
-- params: runs jsonb
-- Requests with an idempotency key or debounce, decided under locks taken in the global lock
-- order (sql/triggering/keyed.sql). The same JSON parameter as insert_runs, with the keys. Rows
-- come back in request order; a rejection (queue full) is a single row with a NULL id naming
-- the first request that did not fit, and nothing was written.
SELECT id, NULL::bigint[] AS ids, outcome, environment, queue, size_limit, scope, size, item
FROM {schema}.trigger_keyed_runs(%(runs)s::jsonb);
