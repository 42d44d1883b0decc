-- Batches: created in one call (charged to the environment's token bucket), filled with items
-- in any number of calls, sealed when all run_count items are in. Each item becomes a carrier
-- run of the built-in task fairlane.batch_item in the environment's reserved queue __batches__
-- (its concurrency_limit is the environment's batch concurrency), so the fair scheduler
-- processes batches: DRR across environments, caps per environment. The carrier's handler
-- turns the item into its run under the item's row lock (one run per item, see
-- fairlane/batches/processing.py); oversized items become pre-failed runs at ingest.

-- function: create_batch
-- Phase one. Outcomes: CREATED, EXISTING (the idempotency key names a batch of the
-- environment; nothing charged), RATE_LIMITED (retry_after_s until the bucket holds run_count
-- tokens), TOO_MANY (run_count above batch_max_items, which is returned as `limit_value`).
-- The bucket row is locked first, so concurrent creations of one environment take turns.
CREATE OR REPLACE FUNCTION {schema}.create_batch(
    env text, wanted integer, parent bigint, key text)
RETURNS TABLE (batch_id bigint, outcome text, retry_after_s float8, limit_value float8)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    max_items integer := {schema}.numeric_setting('batch_max_items', 1000)::integer;
    cfg record;
    bucket record;
    available float8;
    existing bigint;
    new_id bigint;
    new_waitpoint bigint;
BEGIN
    IF wanted > max_items OR wanted < 1 THEN
        RETURN QUERY SELECT NULL::bigint, 'TOO_MANY'::text, NULL::float8, max_items::float8;
        RETURN;
    END IF;
    INSERT INTO {schema}.environments (name) VALUES (env) ON CONFLICT DO NOTHING;
    SELECT coalesce(e.batch_refill_amount,
                    {schema}.numeric_setting('batch_refill_amount', 100))::float8 AS amount,
           coalesce(e.batch_refill_interval_s,
                    {schema}.numeric_setting('batch_refill_interval_s', 10))::float8 AS every,
           coalesce(e.batch_bucket_max,
                    {schema}.numeric_setting('batch_bucket_max', 1200))::float8 AS most,
           coalesce(e.batch_concurrency,
                    {schema}.numeric_setting('batch_concurrency', 10))::integer AS concurrency
    INTO cfg
    FROM {schema}.environments e WHERE e.name = env;
    INSERT INTO {schema}.batch_buckets (environment, tokens, refilled_at)
    VALUES (env, cfg.most, now())
    ON CONFLICT (environment) DO NOTHING;
    SELECT b.tokens, b.refilled_at INTO bucket
    FROM {schema}.batch_buckets b WHERE b.environment = env FOR UPDATE;
    IF key IS NOT NULL THEN
        SELECT b.id INTO existing
        FROM {schema}.batches b WHERE b.environment = env AND b.idempotency_key = key;
        IF existing IS NOT NULL THEN
            RETURN QUERY SELECT existing, 'EXISTING'::text, NULL::float8, NULL::float8;
            RETURN;
        END IF;
    END IF;
    available := least(cfg.most, bucket.tokens
        + extract(epoch FROM now() - bucket.refilled_at) / greatest(cfg.every, 0.001) * cfg.amount);
    IF available < wanted THEN
        UPDATE {schema}.batch_buckets b SET tokens = available, refilled_at = now()
        WHERE b.environment = env;
        RETURN QUERY SELECT NULL::bigint, 'RATE_LIMITED'::text,
            CASE WHEN cfg.amount > 0 AND wanted <= cfg.most
                 THEN (wanted - available) / cfg.amount * cfg.every END,
            cfg.most;
        RETURN;
    END IF;
    UPDATE {schema}.batch_buckets b SET tokens = available - wanted, refilled_at = now()
    WHERE b.environment = env;
    INSERT INTO {schema}.queues AS q (environment, name, concurrency_limit)
    VALUES (env, '__batches__', cfg.concurrency)
    ON CONFLICT (environment, name) DO UPDATE SET concurrency_limit = EXCLUDED.concurrency_limit
    WHERE q.concurrency_limit IS DISTINCT FROM EXCLUDED.concurrency_limit;
    IF parent IS NOT NULL THEN
        INSERT INTO {schema}.waitpoints (kind, status) VALUES ('BATCH', 'PENDING')
        RETURNING id INTO new_waitpoint;
    END IF;
    INSERT INTO {schema}.batches
        (environment, run_count, idempotency_key, parent_run_id, waitpoint_id, seal_deadline)
    VALUES (env, wanted, key, parent, new_waitpoint,
            now() + make_interval(secs => {schema}.numeric_setting('batch_seal_timeout_s', 1800)))
    RETURNING id INTO new_id;
    RETURN QUERY SELECT new_id, 'CREATED'::text, NULL::float8, NULL::float8;
END;
$$;

-- function: finish_batch
-- A sealed batch whose every item became a run (or a pre-failed run) completes, and its
-- waitpoint completes with the summary (run ids by index). The runs waiting on it then wait on
-- the items' runs (attach_batch_runs), so they resume when every one of those is final, with
-- its result. Idempotent.
CREATE OR REPLACE FUNCTION {schema}.finish_batch(target bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    done record;
BEGIN
    UPDATE {schema}.batches AS b
    SET status = CASE WHEN b.failed = 0 THEN 'COMPLETED' ELSE 'PARTIAL_FAILED' END,
        completed_at = now()
    WHERE b.id = target AND b.sealed AND b.status = 'PROCESSING'
      AND b.succeeded + b.failed >= b.run_count
    RETURNING b.id, b.status, b.succeeded, b.failed, b.run_count, b.waitpoint_id INTO done;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF done.waitpoint_id IS NOT NULL THEN
        UPDATE {schema}.waitpoints AS w
        SET status = 'COMPLETED', completed_at = now(), is_error = false,
            output = jsonb_build_object(
                'batch_id', done.id, 'status', done.status, 'succeeded', done.succeeded,
                'failed', done.failed, 'run_count', done.run_count,
                'run_ids', (SELECT jsonb_agg(i.run_id ORDER BY i.index)
                            FROM {schema}.batch_items i WHERE i.batch_id = target))
        WHERE w.id = done.waitpoint_id AND w.status = 'PENDING';
        IF FOUND THEN
            -- The runs waiting on the batch now wait on its items' runs too (a later statement
            -- than the waitpoint's update: it sees the edges of every waiter that held it).
            PERFORM {schema}.attach_batch_runs(target);
            PERFORM {schema}.wake_waiting_runs(ARRAY[done.waitpoint_id]);
        END IF;
    END IF;
    RETURN true;
END;
$$;

-- function: record_batch_item
-- The item became `made` (its run, or a pre-failed run when not `ok`): link the run, mark the
-- item, count it, and finish the batch when it was the last. Only a PENDING item counts, so a
-- repeat (redelivery) changes nothing. Returns whether this call recorded it.
--
-- Called under the item's row lock (the carrier's, or fail_batch_item's); the counters are
-- bumped under the batch row's, and finish_batch decides in a later statement, so exactly one
-- transaction sees the last item counted in a sealed batch. A carrier read the batch's status
-- without locking it: if the batch was aborted since, its run must not be made, so the call
-- fails with SQLSTATE FLB01 and the carrier's transaction (with the run) rolls back.
CREATE OR REPLACE FUNCTION {schema}.record_batch_item(
    target bigint, item integer, made bigint, ok boolean, reason jsonb)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE {schema}.batch_items AS i
    SET state = CASE WHEN ok THEN 'TRIGGERED' ELSE 'FAILED' END, run_id = made, error = reason
    WHERE i.batch_id = target AND i.index = item AND i.state = 'PENDING';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE {schema}.runs AS r SET batch_id = target, batch_index = item
    WHERE r.id = made AND r.batch_id IS NULL;
    UPDATE {schema}.batches AS b
    SET succeeded = b.succeeded + CASE WHEN ok THEN 1 ELSE 0 END,
        failed = b.failed + CASE WHEN ok THEN 0 ELSE 1 END
    WHERE b.id = target AND (NOT ok OR b.status <> 'ABORTED');
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FLB01',
            MESSAGE = 'batch ' || target || ' was aborted: item ' || item || ' makes no run';
    END IF;
    PERFORM {schema}.finish_batch(target);
    RETURN true;
END;
$$;

-- function: fail_batch_item
-- An item that cannot become a run becomes a pre-failed SYSTEM_FAILURE run with `code`, at
-- its index, and is recorded as failed. A no-op (NULL) when the item is no longer PENDING.
CREATE OR REPLACE FUNCTION {schema}.fail_batch_item(
    target bigint, item integer, code text, message text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    it record;
    made bigint;
BEGIN
    SELECT i.task, i.payload, i.options, b.environment, b.parent_run_id INTO it
    FROM {schema}.batch_items i JOIN {schema}.batches b ON b.id = i.batch_id
    WHERE i.batch_id = target AND i.index = item AND i.state = 'PENDING'
    FOR UPDATE OF i;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO {schema}.runs
        (environment, queue, task, payload, status, max_attempts, parent_run_id, finished_at,
         error, batch_id, batch_index)
    VALUES (it.environment, coalesce(it.options ->> 'queue', 'default'), it.task,
            coalesce(it.payload, 'null'::jsonb), 'SYSTEM_FAILURE', 1, it.parent_run_id, now(),
            jsonb_build_object('type', 'SystemFailure', 'code', code, 'message', message,
                               'attempt', 0),
            target, item)
    ON CONFLICT (batch_id, batch_index) WHERE batch_id IS NOT NULL DO NOTHING
    RETURNING id INTO made;
    IF made IS NULL THEN
        SELECT r.id INTO made FROM {schema}.runs r
        WHERE r.batch_id = target AND r.batch_index = item;
    END IF;
    PERFORM {schema}.record_batch_item(
        target, item, made, false, jsonb_build_object('code', code, 'message', message));
    RETURN made;
END;
$$;

-- function: ingest_batch_items
-- Phase two, one slice of items. Items already in (same index) are skipped, so resending is
-- safe. New items get their carrier run; oversized ones become PAYLOAD_TOO_LARGE runs now.
-- The batch seals when all run_count items are in. Indexes at or past run_count are refused
-- by the caller before this runs (and ignored here). A sealed or aborted batch takes nothing.
--
-- Locks follow the global order (docs/concurrency.md): the items first, then the batch row.
-- Carriers lock their item, then bump the batch's counters; an ingest that locked the batch
-- first and then met an item a carrier had just marked deadlocked with it. Items are inserted
-- in index order, so two ingests of one batch wait for each other's items, never in a cycle.
-- Every decision is made under the batch row lock, in a statement after it: whether the batch
-- still takes items (an abort may have come in between: the items inserted are taken back),
-- and the count that seals it, which sees every item of every ingest that held the lock
-- before (each inserts before it locks), so the last of concurrent ingests seals.
CREATE OR REPLACE FUNCTION {schema}.ingest_batch_items(
    target bigint, indexes integer[], tasks text[], payloads text[], options text[],
    oversized boolean[], made bigint[] DEFAULT NULL, refusals text[] DEFAULT NULL)
RETURNS TABLE (accepted integer, received integer, run_count integer, sealed boolean,
               status text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    b record;
    new_indexes integer[];
    big_indexes integer[];
    made_indexes integer[];
    refused_indexes integer[];
    attempts integer;
    total integer;
BEGIN
    -- Unlocked: run_count never changes, and sealed/status are read again under the lock.
    SELECT x.environment, x.run_count, x.sealed, x.status INTO b
    FROM {schema}.batches x WHERE x.id = target;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT b.sealed AND b.status = 'PENDING' THEN
        -- `made[i]`: the item already became that run (a parent's batch_trigger_and_wait made
        -- it in this transaction); `refusals[i]`: it can never become one, for that reason. A
        -- NULL array stands for all NULL (unnest pads it).
        WITH given AS (
            SELECT n.*
            FROM unnest(indexes, tasks, payloads, options, oversized, made, refusals)
                 WITH ORDINALITY AS n(idx, task, payload, opts, big, run_id, refusal, position)
            WHERE n.idx >= 0 AND n.idx < b.run_count
        ), fresh AS (
            INSERT INTO {schema}.batch_items
                (batch_id, index, task, payload, options, oversized, state, run_id)
            SELECT target, g.idx, g.task, g.payload::jsonb,
                   coalesce(g.opts::jsonb, '{{}}'::jsonb), g.big,
                   CASE WHEN g.run_id IS NOT NULL THEN 'TRIGGERED' ELSE 'PENDING' END, g.run_id
            FROM given g
            ORDER BY g.idx, g.position  -- the first of an index sent twice wins
            ON CONFLICT (batch_id, index) DO NOTHING
            RETURNING index, oversized, state
        )
        SELECT array_agg(f.index ORDER BY f.index)
                   FILTER (WHERE f.state = 'PENDING' AND NOT f.oversized
                           AND f.index NOT IN (SELECT g.idx FROM given g
                                               WHERE g.refusal IS NOT NULL)),
               array_agg(f.index ORDER BY f.index) FILTER (WHERE f.oversized),
               array_agg(f.index ORDER BY f.index) FILTER (WHERE f.state = 'TRIGGERED'),
               array_agg(f.index ORDER BY f.index)
                   FILTER (WHERE f.state = 'PENDING' AND NOT f.oversized
                           AND f.index IN (SELECT g.idx FROM given g
                                           WHERE g.refusal IS NOT NULL))
        INTO new_indexes, big_indexes, made_indexes, refused_indexes
        FROM fresh f;
        SELECT x.environment, x.run_count, x.sealed, x.status INTO b
        FROM {schema}.batches x WHERE x.id = target FOR UPDATE;
        IF b.sealed OR b.status <> 'PENDING' THEN
            -- Aborted since the first read: it takes nothing, so what was inserted goes.
            DELETE FROM {schema}.batch_items AS i
            WHERE i.batch_id = target
              AND i.index = ANY(coalesce(new_indexes, '{{}}') || coalesce(big_indexes, '{{}}')
                                || coalesce(made_indexes, '{{}}')
                                || coalesce(refused_indexes, '{{}}'));
            new_indexes := NULL;
            big_indexes := NULL;
            made_indexes := NULL;
            refused_indexes := NULL;
        END IF;
    END IF;
    IF new_indexes IS NOT NULL THEN
        attempts := {schema}.numeric_setting('batch_item_max_attempts', 8)::integer;
        WITH carriers AS (
            INSERT INTO {schema}.runs (environment, queue, task, payload, status, max_attempts)
            SELECT b.environment, '__batches__', 'fairlane.batch_item',
                   jsonb_build_object('batch_id', target, 'index', n.idx), 'QUEUED',
                   greatest(attempts, 1)
            FROM unnest(new_indexes) AS n(idx)
            ORDER BY n.idx
            RETURNING id, (payload ->> 'index')::integer AS idx
        )
        UPDATE {schema}.batch_items AS i SET carrier_run_id = c.id
        FROM carriers c WHERE i.batch_id = target AND i.index = c.idx;
        PERFORM pg_notify({channel}, b.environment);
    END IF;
    IF made_indexes IS NOT NULL THEN
        -- Under the batch row's lock, like a carrier's record_batch_item.
        UPDATE {schema}.runs AS r SET batch_id = target, batch_index = i.index
        FROM {schema}.batch_items i
        WHERE i.batch_id = target AND i.index = ANY(made_indexes)
          AND r.id = i.run_id AND r.batch_id IS NULL;
        UPDATE {schema}.batches AS x SET succeeded = x.succeeded + cardinality(made_indexes)
        WHERE x.id = target;
    END IF;
    IF refused_indexes IS NOT NULL THEN
        PERFORM {schema}.fail_batch_item(target, g.idx, 'BATCH_ITEM_COULD_NOT_TRIGGER', g.refusal)
        FROM unnest(indexes, refusals) AS g(idx, refusal)
        WHERE g.idx = ANY(refused_indexes) AND g.refusal IS NOT NULL;
    END IF;
    IF big_indexes IS NOT NULL THEN
        PERFORM {schema}.fail_batch_item(
            target, big.idx, 'PAYLOAD_TOO_LARGE',
            'the item is larger than the batch item size limit of '
            || {schema}.numeric_setting('batch_item_max_bytes', 3145728)::bigint || ' bytes')
        FROM unnest(big_indexes) AS big(idx);
    END IF;
    SELECT count(*)::integer INTO total FROM {schema}.batch_items i WHERE i.batch_id = target;
    IF NOT b.sealed AND b.status = 'PENDING' AND total >= b.run_count THEN
        UPDATE {schema}.batches AS x SET sealed = true, sealed_at = now(), status = 'PROCESSING'
        WHERE x.id = target;
        PERFORM {schema}.finish_batch(target);
    END IF;
    RETURN QUERY
    SELECT coalesce(cardinality(new_indexes), 0) + coalesce(cardinality(big_indexes), 0)
               + coalesce(cardinality(made_indexes), 0)
               + coalesce(cardinality(refused_indexes), 0),
           total, x.run_count, x.sealed, x.status
    FROM {schema}.batches x WHERE x.id = target;
END;
$$;

-- function: abort_unsealed_batches
-- The periodic job: a batch still unsealed past its seal deadline is ABORTED and a parent
-- waiting on it resumes with the error. Also, an item whose carrier run ended without making
-- its run (a worker crashed on its last attempt) becomes a BATCH_ITEM_COULD_NOT_TRIGGER run,
-- so its batch still completes. Safe from several sessions at once (SKIP LOCKED).
--
-- In the global lock order: the orphaned items first (all of them, in one statement, skipping
-- the ones a carrier holds), then their batch rows by id, and only then what finishing a batch
-- touches (its waitpoint, the parent run); the batches to abort are taken last, skipping the
-- ones an ingest or a carrier holds (they are due again on the next tick).
CREATE OR REPLACE FUNCTION {schema}.abort_unsealed_batches()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    expired record;
    aborted integer := 0;
    orphans record;
    k integer;
BEGIN
    SELECT array_agg(o.batch_id ORDER BY o.batch_id, o.index) AS batch_ids,
           array_agg(o.index ORDER BY o.batch_id, o.index) AS indexes,
           array_agg(o.status ORDER BY o.batch_id, o.index) AS statuses
    INTO orphans
    FROM (SELECT i.batch_id, i.index, r.status
          FROM {schema}.batch_items i
          JOIN {schema}.runs r ON r.id = i.carrier_run_id
          WHERE i.state = 'PENDING'
            AND r.status IN ('COMPLETED', 'FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED',
                             'CANCELED', 'SYSTEM_FAILURE')
          ORDER BY i.batch_id, i.index
          LIMIT 1000
          FOR UPDATE OF i SKIP LOCKED) AS o;
    IF orphans.batch_ids IS NOT NULL THEN
        PERFORM 1 FROM {schema}.batches b
        WHERE b.id = ANY(orphans.batch_ids) ORDER BY b.id FOR UPDATE;
        FOR k IN 1 .. cardinality(orphans.batch_ids) LOOP
            PERFORM {schema}.fail_batch_item(
                orphans.batch_ids[k], orphans.indexes[k], 'BATCH_ITEM_COULD_NOT_TRIGGER',
                'the item''s carrier run ended ' || orphans.statuses[k]
                || ' without triggering it');
        END LOOP;
    END IF;
    FOR expired IN
        SELECT b.id, b.waitpoint_id
        FROM {schema}.batches b
        WHERE b.status = 'PENDING' AND NOT b.sealed AND b.seal_deadline <= now()
        ORDER BY b.seal_deadline
        LIMIT 1000
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE {schema}.batches AS b
        SET status = 'ABORTED', completed_at = now(),
            error = jsonb_build_object(
                'code', 'BATCH_SEAL_TIMEOUT',
                'message', 'batch ' || b.id || ' was not sealed within its seal timeout: '
                           || (SELECT count(*) FROM {schema}.batch_items i
                               WHERE i.batch_id = b.id) || ' of ' || b.run_count
                           || ' items were received')
        WHERE b.id = expired.id;
        IF expired.waitpoint_id IS NOT NULL THEN
            UPDATE {schema}.waitpoints AS w
            SET status = 'COMPLETED', completed_at = now(), is_error = true,
                output = (SELECT b.error || jsonb_build_object('batch_id', b.id,
                                                               'status', 'ABORTED',
                                                               'run_count', b.run_count)
                          FROM {schema}.batches b WHERE b.id = expired.id)
            WHERE w.id = expired.waitpoint_id AND w.status = 'PENDING';
            -- The items that did become runs are waited for too; the others report the abort.
            PERFORM {schema}.attach_batch_runs(expired.id);
            PERFORM {schema}.wake_waiting_runs(ARRAY[expired.waitpoint_id]);
        END IF;
        aborted := aborted + 1;
    END LOOP;
    RETURN jsonb_build_object('aborted', aborted,
                              'orphaned_items', coalesce(cardinality(orphans.batch_ids), 0));
END;
$$;

-- name: create_batch
SELECT batch_id, outcome, retry_after_s, limit_value
FROM {schema}.create_batch(%(environment)s, %(run_count)s, %(parent_run_id)s,
                           %(idempotency_key)s);

-- name: ingest_batch_items
SELECT accepted, received, run_count, sealed, status
FROM {schema}.ingest_batch_items(
    %(batch_id)s, %(indexes)s::integer[], %(tasks)s::text[], %(payloads)s::text[],
    %(options)s::text[], %(oversized)s::boolean[], %(made)s::bigint[], %(refusals)s::text[]);

-- name: attach_batch_waiter
-- A run that starts to wait on a batch that has already ended waits on its items' runs.
SELECT {schema}.attach_batch_runs(%(batch_id)s, %(run_id)s);

-- name: get_batch
SELECT b.id, b.environment, b.run_count, b.status, b.sealed, b.succeeded, b.failed,
       b.parent_run_id, b.waitpoint_id, b.idempotency_key, b.created_at, b.sealed_at,
       b.completed_at, b.error,
       (SELECT count(*)::integer FROM {schema}.batch_items i WHERE i.batch_id = b.id) AS received
FROM {schema}.batches b WHERE b.id = %(id)s;

-- name: batch_run_ids
SELECT i.index, i.state, i.run_id, i.error
FROM {schema}.batch_items i WHERE i.batch_id = %(id)s ORDER BY i.index;

-- name: lock_batch_item
-- The carrier's transaction: the item under its row lock, with what triggering it needs.
SELECT i.state, i.task, i.payload, i.options, b.environment, b.status, b.parent_run_id
FROM {schema}.batch_items i JOIN {schema}.batches b ON b.id = i.batch_id
WHERE i.batch_id = %(batch_id)s AND i.index = %(index)s
FOR UPDATE OF i;

-- name: skip_batch_item
UPDATE {schema}.batch_items SET state = 'SKIPPED'
WHERE batch_id = %(batch_id)s AND index = %(index)s AND state = 'PENDING';

-- name: record_batch_item
SELECT {schema}.record_batch_item(%(batch_id)s, %(index)s, %(run_id)s, true, NULL);

-- name: fail_batch_item
SELECT {schema}.fail_batch_item(%(batch_id)s, %(index)s, %(code)s, %(message)s);

-- name: set_environment_batch_limits
INSERT INTO {schema}.environments (name) VALUES (%(environment)s) ON CONFLICT DO NOTHING;

-- name: update_environment_batch_limits
UPDATE {schema}.environments
SET batch_refill_amount = %(refill_amount)s, batch_refill_interval_s = %(refill_interval_s)s,
    batch_bucket_max = %(bucket_max)s, batch_concurrency = %(concurrency)s
WHERE name = %(environment)s
RETURNING batch_concurrency;

-- name: sync_batch_queue_concurrency
-- Sent before the environment's row is created or updated: queue rows come before
-- environment rows in the global lock order (docs/concurrency.md).
UPDATE {schema}.queues AS q
SET concurrency_limit = coalesce(%(concurrency)s::integer,
                                 {schema}.numeric_setting('batch_concurrency', 10)::integer)
WHERE q.environment = %(environment)s AND q.name = '__batches__';

-- name: batch_item_max_bytes
SELECT {schema}.numeric_setting('batch_item_max_bytes', 3145728)::bigint;

-- name: batch_waitpoint
SELECT waitpoint_id FROM {schema}.batches WHERE id = %(batch_id)s;
