-- trigger_keyed_runs as it stood from revision 0004 to 0008, taking one array per request
-- field: 0004 installs it from here and 0009's downgrade restores it (sql/trigger_keyed.sql has
-- the current form, which takes the requests as JSON). Frozen: never edit it to follow later
-- changes.

-- name: trigger_keyed_runs_0008
-- Many requests, in order, all or nothing: a full queue undoes the requests before it (the
-- block is a subtransaction) and comes back as one row naming the queue and the request.
CREATE OR REPLACE FUNCTION {schema}.trigger_keyed_runs(
    environments text[], queues text[], tasks text[], payloads text[], priorities integer[],
    max_attempts integer[], delays float8[], delay_untils timestamptz[], tags text[],
    metadata text[], machines text[], max_durations float8[], ttls float8[],
    parent_run_ids bigint[], idempotency_keys text[], idempotency_ttls float8[],
    debounce_keys text[], debounce_delays float8[], debounce_trailing boolean[],
    debounce_max_delays float8[])
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
    SELECT DISTINCT e FROM unnest(environments) AS e
    ON CONFLICT DO NOTHING;
    INSERT INTO {schema}.queues (environment, name)
    SELECT DISTINCT e, q FROM unnest(environments, queues) AS u(e, q)
    ON CONFLICT DO NOTHING;
    BEGIN
        FOR request IN
            SELECT *
            FROM unnest(environments, queues, tasks, payloads, priorities, max_attempts, delays,
                        delay_untils, tags, metadata, machines, max_durations, ttls,
                        parent_run_ids, idempotency_keys, idempotency_ttls, debounce_keys,
                        debounce_delays, debounce_trailing, debounce_max_delays)
                 WITH ORDINALITY
                 AS u(env, queue_name, task_name, payload, priority, max_attempts, delay_s,
                      delay_until, tags, metadata, machine, max_duration_s, ttl_s, parent_id,
                      idem_key, idem_ttl_s, debounce_key, debounce_delay_s, debounce_trailing,
                      debounce_max_delay_s, ord)
            ORDER BY ord
        LOOP
            current_item := request.ord - 1;
            SELECT * INTO made FROM {schema}.trigger_keyed_run(
                request.env, request.queue_name, request.task_name, request.payload::jsonb,
                request.priority, request.max_attempts, request.delay_s, request.delay_until,
                ARRAY(SELECT jsonb_array_elements_text(request.tags::jsonb)),
                request.metadata::jsonb, request.machine, request.max_duration_s,
                request.ttl_s, request.parent_id, request.idem_key, request.idem_ttl_s,
                request.debounce_key, request.debounce_delay_s, request.debounce_trailing,
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
