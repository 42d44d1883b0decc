-- Triggers with an idempotency key or debounce. A call (one request or many) takes its locks
-- in the global lock order (docs/concurrency.md) across all its requests, so that calls whose
-- requests come in any order wait for each other instead of deadlocking:
--
--   1. the size-limit locks of every (environment, queue) it touches (lock_queue_sizes), then
--      sizes those queues and environments in a later statement (queue_sizes: a bound where
--      every request of the call would fit under it, else a count);
--   2. every debounce key's row, in (environment, task, key) order (lock_debounce_key);
--   3. then it decides the requests in request order, in the seeds' order for each: idempotency
--      (a hit returns the run holding the key), then debounce (join the key's delayed run),
--      and only then a new run. Where the call's idempotency keys come in key order, a new run
--      takes its key as it is made, so the unique index waits (for another trigger making a
--      run with that key) follow key order; otherwise the new runs are made without their keys,
--      which are set at the end in key order (claim_idempotency_keys);
--   4. last, the new runs are checked against the sizes found in 1: past a limit, the whole
--      call is undone and the first request that did not fit is reported; otherwise the runs
--      it made are added to the bounds (record_size_bounds), still under the locks.
--
-- No decision stands on a row it does not hold a lock or a unique index entry for by the end
-- of the call (a key set at the end that another trigger committed first makes the call decide
-- again), so concurrent triggers cannot both decide to make a run.

-- function: trigger_keyed_run
-- A new run for one request, with its idempotency key if `idem_key` is given (mirrors
-- insert_runs for one run; options not given take the runs table's defaults). Returns NULL,
-- inserting nothing, when another trigger committed a run with that key first: the INSERT
-- waited for that trigger and the caller must decide the request again. Points the debounce
-- key at the new run and wakes idle workers (at commit) when the run is queued at once.
CREATE OR REPLACE FUNCTION {schema}.trigger_keyed_run(
    request jsonb, idem_key text, key_expires_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
    start_at timestamptz;
    ttl float8;
    max_ttl float8 := {schema}.numeric_setting('max_ttl_s', NULL);
    made bigint;
BEGIN
    SELECT * INTO r FROM {schema}.trigger_requests(jsonb_build_array(request));
    start_at := CASE WHEN r.delay_until > now() THEN r.delay_until
                     WHEN r.delay_s > 0 THEN now() + make_interval(secs => r.delay_s) END;
    ttl := CASE WHEN max_ttl IS NULL THEN r.ttl_s
                ELSE least(coalesce(r.ttl_s, max_ttl), max_ttl) END;
    INSERT INTO {schema}.runs
        (environment, queue, task, payload, status, priority, max_attempts, available_at,
         tags, metadata, machine, max_duration_s, ttl_s, expires_at, parent_run_id,
         idempotency_key, idempotency_key_expires_at, concurrency_key)
    VALUES
        (r.environment, r.queue, r.task, coalesce(r.payload, 'null'),
         CASE WHEN start_at IS NOT NULL THEN 'DELAYED' ELSE 'QUEUED' END,
         r.priority, coalesce(r.max_attempts, 3), start_at,
         ARRAY(SELECT jsonb_array_elements_text(r.tags)), coalesce(r.metadata, '{{}}'),
         r.machine, r.max_duration_s, ttl,
         CASE WHEN start_at IS NULL AND ttl IS NOT NULL THEN now() + make_interval(secs => ttl) END,
         r.parent_run_id, idem_key, key_expires_at, r.concurrency_key)
    ON CONFLICT (environment, task, idempotency_key) WHERE idempotency_key IS NOT NULL
    DO NOTHING
    RETURNING id INTO made;
    IF made IS NULL THEN
        RETURN NULL;
    END IF;
    IF start_at IS NULL THEN
        -- Repeats within a transaction fold into one notification.
        PERFORM pg_notify({channel}, r.environment);
    END IF;
    IF r.debounce_key IS NOT NULL THEN
        UPDATE {schema}.debounce_keys k SET run_id = made
        WHERE k.environment = r.environment AND k.task = r.task AND k.key = r.debounce_key;
    END IF;
    RETURN made;
END;
$$;

-- function: claim_idempotency_keys
-- Give new runs their idempotency keys (`keys[i]` to run `ids[i]`), one by one in
-- (environment, task, key) order: setting a key waits for another trigger making a run with
-- it, so these waits follow the global lock order. A key that trigger committed first raises
-- unique_violation: the caller decides its requests again, now seeing that run.
CREATE OR REPLACE FUNCTION {schema}.claim_idempotency_keys(ids bigint[], keys text[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    pending record;
BEGIN
    FOR pending IN
        SELECT r.id, given.key
        FROM unnest(ids, keys) AS given(id, key)
        JOIN {schema}.runs r ON r.id = given.id
        ORDER BY r.environment, r.task, given.key
    LOOP
        UPDATE {schema}.runs r SET idempotency_key = pending.key WHERE r.id = pending.id;
    END LOOP;
END;
$$;

-- function: decide_keyed_requests
-- Decide every request in request order, once the call holds its size-limit and debounce
-- locks: 'idempotent' (a run holds its key: an earlier request of the call that made it, or
-- find_idempotent_run), 'debounced' (joined its key's delayed run), or 'created'. Returns the
-- run and outcome of each request, in request order. With `defer_keys`, new runs are made
-- without their idempotency keys and get them at the end (claim_idempotency_keys).
CREATE OR REPLACE FUNCTION {schema}.decide_keyed_requests(
    requests jsonb, defer_keys boolean, OUT ids bigint[], OUT outcomes text[])
LANGUAGE plpgsql
AS $$
DECLARE
    request record;
    -- The run holding each key in this call, at the position of the key's first request.
    holders bigint[] := '{{}}';
    held bigint;
    debounced bigint;
    made bigint;
    pending_ids bigint[] := '{{}}';
    pending_keys text[] := '{{}}';
    key_ttl float8 := {schema}.numeric_setting('idempotency_key_ttl_s', 2592000);
BEGIN
    ids := '{{}}';
    outcomes := '{{}}';
    FOR request IN
        SELECT r.*, requests -> (r.ord::integer - 1) AS fields,
               first_value(r.ord) OVER (PARTITION BY r.environment, r.task, r.idempotency_key
                                        ORDER BY r.ord)::integer AS first_of_key
        FROM {schema}.trigger_requests(requests) AS r
        ORDER BY r.ord
    LOOP
        LOOP
            IF request.idempotency_key IS NOT NULL THEN
                held := coalesce(holders[request.first_of_key], {schema}.find_idempotent_run(
                    request.environment, request.task, request.idempotency_key));
                IF held IS NOT NULL THEN
                    holders[request.first_of_key] := held;
                    ids := ids || held;
                    outcomes := outcomes || 'idempotent'::text;
                    EXIT;
                END IF;
            END IF;
            IF request.debounce_key IS NOT NULL THEN
                SELECT k.run_id INTO debounced FROM {schema}.debounce_keys k
                WHERE k.environment = request.environment AND k.task = request.task
                  AND k.key = request.debounce_key;
                IF debounced IS NOT NULL AND {schema}.join_debounced_run(
                        debounced, request.debounce_delay_s, request.debounce_max_delay_s,
                        request.debounce_trailing, coalesce(request.payload, 'null'),
                        request.metadata,
                        CASE WHEN request.tags IS NOT NULL
                             THEN ARRAY(SELECT jsonb_array_elements_text(request.tags)) END,
                        request.max_attempts, request.max_duration_s, request.machine) THEN
                    ids := ids || debounced;
                    outcomes := outcomes || 'debounced'::text;
                    EXIT;
                END IF;
            END IF;
            made := {schema}.trigger_keyed_run(
                request.fields,
                CASE WHEN NOT defer_keys THEN request.idempotency_key END,
                CASE WHEN request.idempotency_key IS NOT NULL THEN now() + make_interval(
                    secs => coalesce(request.idempotency_ttl_s, key_ttl)) END);
            -- NULL: a concurrent trigger committed a run with this key first; decide again,
            -- and the idempotency check finds that run.
            IF made IS NOT NULL THEN
                IF request.idempotency_key IS NOT NULL THEN
                    holders[request.first_of_key] := made;
                    IF defer_keys THEN
                        pending_ids := pending_ids || made;
                        pending_keys := pending_keys || request.idempotency_key;
                    END IF;
                END IF;
                ids := ids || made;
                outcomes := outcomes || 'created'::text;
                EXIT;
            END IF;
        END LOOP;
    END LOOP;
    IF cardinality(pending_ids) > 0 THEN
        PERFORM {schema}.claim_idempotency_keys(pending_ids, pending_keys);
    END IF;
END;
$$;

-- function: trigger_keyed_runs
-- Many requests (the trigger statements' JSON parameter, read by trigger_requests), all or
-- nothing: a full queue undoes the whole call (everything after the first-use rows is one
-- subtransaction) and comes back as one row naming the queue and the first request that did
-- not fit. Otherwise one row per request, in request order.
CREATE OR REPLACE FUNCTION {schema}.trigger_keyed_runs(requests jsonb)
RETURNS TABLE (id bigint, outcome text, environment text, queue text, size_limit integer,
               scope text, size integer, item integer)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    envs text[];
    queues text[];
    keys_in_order boolean;
    debounced boolean;
    sizes jsonb;
    made_envs text[];
    made_queues text[];
    made_items integer[];
    decided record;
    full_queue record;
    failed text;
BEGIN
    -- First use: the rows are made in name order, since an INSERT waits for another trigger
    -- inserting the same row as for a lock.
    INSERT INTO {schema}.environments (name, concurrency_limit)
    SELECT DISTINCT r.environment, (SELECT {schema}.new_environment_limit())
    FROM {schema}.trigger_requests(requests) AS r
    ORDER BY 1
    ON CONFLICT DO NOTHING;
    INSERT INTO {schema}.queues (environment, name)
    SELECT DISTINCT r.environment, r.queue FROM {schema}.trigger_requests(requests) AS r
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING;
    SELECT array_agg(r.environment ORDER BY r.ord), array_agg(r.queue ORDER BY r.ord),
           coalesce(bool_and(r.in_order), true), bool_or(r.debounce_key IS NOT NULL)
    INTO envs, queues, keys_in_order, debounced
    FROM (SELECT r.environment, r.queue, r.debounce_key, r.ord,
                 -- Each keyed request against the keyed one before it (the first: NULL).
                 CASE WHEN r.idempotency_key IS NOT NULL
                      THEN (r.environment, r.task, r.idempotency_key)
                           >= (lag(r.environment) OVER w, lag(r.task) OVER w,
                               lag(r.idempotency_key) OVER w) END AS in_order
          FROM {schema}.trigger_requests(requests) AS r
          WINDOW w AS (PARTITION BY r.idempotency_key IS NULL ORDER BY r.ord)) AS r;
    BEGIN
        IF {schema}.lock_queue_sizes(envs, queues) THEN
            -- A later statement than the locks: it counts what their holders committed. Each
            -- request may make a run, so a bound is used only where all of them fit under it.
            SELECT jsonb_agg(s) INTO sizes
            FROM {schema}.queue_sizes(envs, queues, array_fill(1, ARRAY[cardinality(envs)])) AS s;
        END IF;
        IF debounced THEN
            PERFORM {schema}.lock_debounce_key(
                array_agg(r.environment), array_agg(r.task), array_agg(r.debounce_key))
            FROM {schema}.trigger_requests(requests) AS r
            WHERE r.debounce_key IS NOT NULL;
        END IF;
        IF keys_in_order THEN
            decided := {schema}.decide_keyed_requests(requests, false);
        END IF;
        WHILE decided IS NULL LOOP
            BEGIN
                decided := {schema}.decide_keyed_requests(requests, true);
            EXCEPTION WHEN unique_violation THEN
                GET STACKED DIAGNOSTICS failed = CONSTRAINT_NAME;
                IF failed IS DISTINCT FROM 'runs_idempotency_key_idx' THEN
                    RAISE;
                END IF;
                -- A concurrent trigger committed a run with one of the keys this call gave
                -- its new runs at the end: everything decided is undone (the block is a
                -- subtransaction); decide again, finding that run.
            END;
        END LOOP;
        IF sizes IS NOT NULL THEN
            -- The runs the call made: their queues, and their requests' indexes.
            SELECT coalesce(array_agg(envs[i] ORDER BY i), '{{}}'),
                   coalesce(array_agg(queues[i] ORDER BY i), '{{}}'),
                   coalesce(array_agg(i - 1 ORDER BY i), '{{}}')
            INTO made_envs, made_queues, made_items
            FROM generate_subscripts(decided.outcomes, 1) AS i
            WHERE decided.outcomes[i] = 'created';
            SELECT * INTO full_queue
            FROM {schema}.first_past_size_limit(sizes, made_envs, made_queues, made_items);
            IF FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'FL001', DETAIL = to_jsonb(full_queue)::text,
                    MESSAGE = 'queue ' || full_queue.queue || ' of environment '
                              || full_queue.environment || ' is full';
            END IF;
            PERFORM {schema}.record_size_bounds(
                sizes, made_envs, made_queues, array_fill(1, ARRAY[cardinality(made_envs)]));
        END IF;
    EXCEPTION WHEN SQLSTATE 'FL001' THEN
        GET STACKED DIAGNOSTICS failed = PG_EXCEPTION_DETAIL;
        RETURN QUERY SELECT NULL::bigint, NULL::text, failed::jsonb ->> 'environment',
                            failed::jsonb ->> 'queue', (failed::jsonb ->> 'size_limit')::integer,
                            failed::jsonb ->> 'scope', (failed::jsonb ->> 'size')::integer,
                            (failed::jsonb ->> 'item')::integer;
        RETURN;
    END;
    RETURN QUERY SELECT made.id, made.outcome, NULL::text, NULL::text, NULL::integer,
                        NULL::text, NULL::integer, (made.ord - 1)::integer
                 FROM unnest(decided.ids, decided.outcomes) WITH ORDINALITY
                     AS made(id, outcome, ord)
                 ORDER BY made.ord;
END;
$$;
