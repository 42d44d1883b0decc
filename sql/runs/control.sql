-- Changing runs from outside a worker: reschedule a delayed run, retry a failed one, and create
-- a run that has already failed. Each is one statement; the decision is made on the locked row.

-- function: reschedule_run
-- A DELAYED run starts at `start_at` instead (earlier or later). The row lock keeps delayed
-- promotion (SKIP LOCKED) off it meanwhile. Any other status changes nothing and is returned,
-- so the caller can say why; no row means no such run.
CREATE OR REPLACE FUNCTION {schema}.reschedule_run(target bigint, start_at timestamptz)
RETURNS TABLE (status text, rescheduled boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    current_status text;
BEGIN
    SELECT r.status INTO current_status FROM {schema}.runs r WHERE r.id = target FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF current_status <> 'DELAYED' THEN
        RETURN QUERY SELECT current_status, false;
        RETURN;
    END IF;
    UPDATE {schema}.runs r SET available_at = start_at WHERE r.id = target;
    RETURN QUERY SELECT current_status, true;
END;
$$;

-- name: reschedule_run
-- params: id bigint, start_at timestamp with time zone, delay_s double precision
SELECT status, rescheduled
FROM {schema}.reschedule_run(
    %(id)s, coalesce(%(start_at)s::timestamptz, now() + make_interval(secs => %(delay_s)s)));

-- function: retry_run
-- A run that ended FAILED, CRASHED, TIMED_OUT, EXPIRED or SYSTEM_FAILURE goes back to QUEUED
-- with exactly one more attempt (max_attempts = attempts + 1); its last error and result are
-- cleared and it gets no TTL (one armed at its first enqueue has lapsed or was spent). Like a
-- retry after a failure, that attempt starts its own waits (wait_attempt). Queue size limits
-- apply as to a trigger. Returns the status it had and whether it was requeued; a full queue
-- returns the limit it hit. No row: no such run.
CREATE OR REPLACE FUNCTION {schema}.retry_run(target bigint)
RETURNS TABLE (previous_status text, retried boolean, environment text, queue text,
               size_limit integer, scope text, size integer)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    failed_run record;
    full_queue record;
BEGIN
    SELECT r.status, r.environment, r.queue INTO failed_run
    FROM {schema}.runs r WHERE r.id = target FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT failed_run.status = ANY({schema}.failed_statuses()) THEN
        RETURN QUERY SELECT failed_run.status, false, NULL::text, NULL::text, NULL::integer,
                            NULL::text, NULL::integer;
        RETURN;
    END IF;
    SELECT * INTO full_queue FROM {schema}.check_queue_sizes(
        ARRAY[failed_run.environment], ARRAY[failed_run.queue], ARRAY[1]);
    IF FOUND THEN
        RETURN QUERY SELECT failed_run.status, false, full_queue.environment, full_queue.queue,
                            full_queue.size_limit, full_queue.scope, full_queue.size;
        RETURN;
    END IF;
    UPDATE {schema}.runs r
    SET status = 'QUEUED',
        queued_at = now(),
        max_attempts = r.attempts + 1,
        wait_attempt = r.attempts + 1,
        available_at = NULL,
        expires_at = NULL,
        started_at = NULL,
        finished_at = NULL,
        worker_id = NULL,
        result = NULL,
        error = NULL
    WHERE r.id = target;
    PERFORM pg_notify({channel}, failed_run.environment);
    RETURN QUERY SELECT failed_run.status, true, NULL::text, NULL::text, NULL::integer,
                        NULL::text, NULL::integer;
END;
$$;

-- name: retry_run
-- params: id bigint
SELECT previous_status, retried, environment, queue, size_limit, scope, size
FROM {schema}.retry_run(%(id)s);

-- name: insert_failed_run
-- params: environment text, queue text, task text, payload jsonb, max_attempts integer,
-- params: tags text[], metadata jsonb, machine text, parent_run_id bigint, code text, message text
-- A run created already ended: SYSTEM_FAILURE with an error code (PAYLOAD_TOO_LARGE,
-- BATCH_ITEM_COULD_NOT_TRIGGER, ...). It never enters a queue, so no size limit applies, and
-- anything waiting on it sees a final run at once. It passes the tenant boundary as a trigger
-- does (check_trigger_request, sql/triggering/requests.sql).
INSERT INTO {schema}.runs
    (environment, queue, task, payload, status, max_attempts, tags, metadata, machine,
     parent_run_id, finished_at, error)
SELECT %(environment)s::text, %(queue)s::text, %(task)s::text, %(payload)s::jsonb,
       'SYSTEM_FAILURE', %(max_attempts)s::integer, %(tags)s::text[], %(metadata)s::jsonb,
       %(machine)s::text, %(parent_run_id)s::bigint, now(),
       jsonb_build_object('type', 'SystemFailure', 'code', %(code)s::text,
                          'message', %(message)s::text, 'attempt', 0)
WHERE {schema}.check_trigger_request(
    %(environment)s::text, %(queue)s::text, %(task)s::text, %(parent_run_id)s::bigint)
RETURNING id;

-- name: matching_run_ids
-- params: environment text, queue text, task text, statuses text[], tags text[], batch_id bigint,
-- params: idempotency_keys text[], before_id bigint, since_s double precision,
-- params: include_carriers boolean, limit bigint
-- One page of the ids a bulk action takes, newest first (the global lock order: runs in
-- descending id order), by the filter of runs_matching (sql/runs/filter.sql).
SELECT id
FROM {schema}.runs_matching(%(environment)s::text, %(queue)s::text, %(task)s::text,
                             %(statuses)s::text[], %(tags)s::text[], %(batch_id)s::bigint,
                             %(idempotency_keys)s::text[], %(before_id)s::bigint,
                             %(since_s)s::float8, %(include_carriers)s::boolean)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: count_matching_runs
-- params: environment text, queue text, task text, statuses text[], tags text[], batch_id bigint,
-- params: idempotency_keys text[], before_id bigint, since_s double precision,
-- params: include_carriers boolean
-- How many runs matching_run_ids would page through: a bulk action's dry run, and the count a
-- confirmation states. One statement, one scan, whatever the count.
SELECT count(*)
FROM {schema}.runs_matching(%(environment)s::text, %(queue)s::text, %(task)s::text,
                             %(statuses)s::text[], %(tags)s::text[], %(batch_id)s::bigint,
                             %(idempotency_keys)s::text[], %(before_id)s::bigint,
                             %(since_s)s::float8, %(include_carriers)s::boolean);

-- name: retry_runs
-- params: ids bigint[]
-- retry_run for each id, in the order given (descending: the global lock order), in one
-- statement and one transaction.
SELECT t.id, r.previous_status, r.retried, r.size_limit
FROM unnest(%(ids)s::bigint[]) WITH ORDINALITY AS t(id, n)
CROSS JOIN LATERAL {schema}.retry_run(t.id) AS r
ORDER BY t.n;
