-- Triggers with an idempotency key or debounce. Each request is decided in the trigger's
-- transaction, in the seeds' order: the debounce key is locked first (so every later check
-- sees what the key's previous trigger committed), then idempotency (a hit returns the run
-- holding the key), then debounce (join the key's delayed run), then the queue size limit,
-- and only then a new run. No decision reads a row it does not hold a lock or a unique index
-- entry for, so concurrent triggers cannot both decide to make a run.

-- function: trigger_keyed_run
-- One request. Returns the run and how it was found: 'created', 'idempotent' (an earlier run
-- holds the key) or 'debounced' (joined the key's delayed run). Raises SQLSTATE FL001 with the
-- full queue as JSON detail when the run would pass a size limit.
CREATE OR REPLACE FUNCTION {schema}.trigger_keyed_run(
    env text, queue_name text, task_name text, new_payload jsonb, new_priority integer,
    new_max_attempts integer, delay_s float8, delay_until timestamptz, new_tags text[],
    new_metadata jsonb, new_machine text, new_max_duration_s float8, requested_ttl_s float8,
    parent_id bigint, idem_key text, idem_ttl_s float8, debounce_key text,
    debounce_delay_s float8, debounce_trailing boolean, debounce_max_delay_s float8,
    OUT run_id bigint, OUT outcome text)
LANGUAGE plpgsql
AS $$
DECLARE
    start_at timestamptz := CASE WHEN delay_until > now() THEN delay_until
                                 WHEN delay_s > 0 THEN now() + make_interval(secs => delay_s)
                            END;
    max_ttl float8 := {schema}.numeric_setting('max_ttl_s', NULL);
    ttl float8 := CASE WHEN max_ttl IS NULL THEN requested_ttl_s
                       ELSE least(coalesce(requested_ttl_s, max_ttl), max_ttl) END;
    key_expires_at timestamptz := now() + make_interval(secs => coalesce(
        idem_ttl_s, {schema}.numeric_setting('idempotency_key_ttl_s', 2592000)));
    debounced_run bigint;
    full_queue record;
BEGIN
    LOOP
        IF debounce_key IS NOT NULL THEN
            debounced_run := {schema}.lock_debounce_key(env, task_name, debounce_key);
        END IF;
        IF idem_key IS NOT NULL THEN
            run_id := {schema}.find_idempotent_run(env, task_name, idem_key);
            IF run_id IS NOT NULL THEN
                outcome := 'idempotent';
                RETURN;
            END IF;
        END IF;
        IF debounced_run IS NOT NULL AND {schema}.join_debounced_run(
                debounced_run, debounce_delay_s, debounce_max_delay_s, debounce_trailing,
                new_payload, new_metadata, new_tags, new_max_attempts, new_max_duration_s,
                new_machine) THEN
            run_id := debounced_run;
            outcome := 'debounced';
            RETURN;
        END IF;

        SELECT * INTO full_queue
        FROM {schema}.check_queue_sizes(ARRAY[env], ARRAY[queue_name], ARRAY[1]);
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'FL001', DETAIL = to_jsonb(full_queue)::text,
                MESSAGE = 'queue ' || queue_name || ' of environment ' || env || ' is full';
        END IF;

        -- Mirrors insert_runs, for one run.
        INSERT INTO {schema}.runs
            (environment, queue, task, payload, status, priority, max_attempts, available_at,
             tags, metadata, machine, max_duration_s, ttl_s, expires_at, parent_run_id,
             idempotency_key, idempotency_key_expires_at)
        VALUES
            (env, queue_name, task_name, new_payload,
             CASE WHEN start_at IS NOT NULL THEN 'DELAYED' ELSE 'QUEUED' END,
             new_priority, new_max_attempts, start_at, new_tags, new_metadata, new_machine,
             new_max_duration_s, ttl,
             CASE WHEN start_at IS NULL AND ttl IS NOT NULL
                  THEN now() + make_interval(secs => ttl) END,
             parent_id, idem_key, CASE WHEN idem_key IS NOT NULL THEN key_expires_at END)
        ON CONFLICT (environment, task, idempotency_key) WHERE idempotency_key IS NOT NULL
        DO NOTHING
        RETURNING id INTO run_id;
        IF run_id IS NOT NULL THEN
            IF start_at IS NULL THEN
                -- Wakes idle workers at commit; repeats within a transaction fold into one.
                PERFORM pg_notify({channel}, env);
            END IF;
            IF debounce_key IS NOT NULL THEN
                UPDATE {schema}.debounce_keys k SET run_id = trigger_keyed_run.run_id
                WHERE k.environment = env AND k.task = task_name AND k.key = debounce_key;
            END IF;
            outcome := 'created';
            RETURN;
        END IF;
        -- A concurrent trigger made a run with this key first (the INSERT waited for it to
        -- commit): go round again, and the idempotency check returns that run.
    END LOOP;
END;
$$;

-- function: trigger_keyed_runs
-- Many requests (the trigger statements' JSON parameter, read by trigger_requests), in order,
-- all or nothing: a full queue undoes the requests before it (the block is a subtransaction)
-- and comes back as one row naming the queue and the request.
CREATE OR REPLACE FUNCTION {schema}.trigger_keyed_runs(requests jsonb)
RETURNS TABLE (id bigint, outcome text, environment text, queue text, size_limit integer,
               scope text, size integer, item integer)
LANGUAGE plpgsql
AS $$
DECLARE
    request record;
    made record;
    ids bigint[] := '{{}}';
    outcomes text[] := '{{}}';
    current_item integer;
    detail jsonb;
BEGIN
    INSERT INTO {schema}.environments (name)
    SELECT DISTINCT r.environment FROM {schema}.trigger_requests(requests) AS r
    ON CONFLICT DO NOTHING;
    INSERT INTO {schema}.queues (environment, name)
    SELECT DISTINCT r.environment, r.queue FROM {schema}.trigger_requests(requests) AS r
    ON CONFLICT DO NOTHING;
    BEGIN
        FOR request IN
            SELECT * FROM {schema}.trigger_requests(requests) AS r ORDER BY r.ord
        LOOP
            current_item := request.ord - 1;
            SELECT * INTO made FROM {schema}.trigger_keyed_run(
                request.environment, request.queue, request.task,
                coalesce(request.payload, 'null'), request.priority, request.max_attempts,
                request.delay_s, request.delay_until,
                ARRAY(SELECT jsonb_array_elements_text(request.tags)), request.metadata,
                request.machine, request.max_duration_s, request.ttl_s, request.parent_run_id,
                request.idempotency_key, request.idempotency_ttl_s, request.debounce_key,
                request.debounce_delay_s, request.debounce_trailing,
                request.debounce_max_delay_s);
            ids := ids || made.run_id;
            outcomes := outcomes || made.outcome;
        END LOOP;
    EXCEPTION WHEN SQLSTATE 'FL001' THEN
        GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
        RETURN QUERY SELECT NULL::bigint, NULL::text, detail ->> 'environment',
                            detail ->> 'queue', (detail ->> 'size_limit')::integer,
                            detail ->> 'scope', (detail ->> 'size')::integer, current_item;
        RETURN;
    END;
    RETURN QUERY SELECT made_ids.id, made_ids.outcome, NULL::text, NULL::text, NULL::integer,
                        NULL::text, NULL::integer, (made_ids.ord - 1)::integer
                 FROM unnest(ids, outcomes) WITH ORDINALITY AS made_ids(id, outcome, ord)
                 ORDER BY made_ids.ord;
END;
$$;
