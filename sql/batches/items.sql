-- Batch items: ingested in slices, each turned into its run by a carrier (or at once by a
-- parent's batch_trigger_and_wait), or into a pre-failed run.

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
-- and the count that seals it: each ingest adds the items it inserted to `received` under
-- the lock, so the last of concurrent ingests sees every item and seals.
--
-- Each new item is inserted with its carrier's id already drawn from the runs' sequence, and
-- the carrier row is inserted with that id once the batch is known to take the items: an item
-- row is written once, never updated to point at its carrier. (An index sent again draws an
-- id that is never used: a gap in the run ids, as a rolled-back trigger leaves.)
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
    new_carriers bigint[];
    big_indexes integer[];
    made_indexes integer[];
    refused_indexes integer[];
    inserted integer := 0;
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
            SELECT n.*, (n.run_id IS NULL AND NOT n.big AND n.refusal IS NULL) AS carried
            FROM unnest(indexes, tasks, payloads, options, oversized, made, refusals)
                 WITH ORDINALITY AS n(idx, task, payload, opts, big, run_id, refusal, position)
            WHERE n.idx >= 0 AND n.idx < b.run_count
        ), fresh AS (
            INSERT INTO {schema}.batch_items
                (batch_id, index, task, payload, options, oversized, state, run_id,
                 carrier_run_id)
            SELECT target, g.idx, g.task, g.payload::jsonb,
                   coalesce(g.opts::jsonb, '{{}}'::jsonb), g.big,
                   CASE WHEN g.run_id IS NOT NULL THEN 'TRIGGERED' ELSE 'PENDING' END, g.run_id,
                   CASE WHEN g.carried THEN nextval('{schema}.runs_id_seq') END
            FROM given g
            ORDER BY g.idx, g.position  -- the first of an index sent twice wins
            ON CONFLICT (batch_id, index) DO NOTHING
            RETURNING index, oversized, state, carrier_run_id
        )
        SELECT array_agg(f.index ORDER BY f.index) FILTER (WHERE f.carrier_run_id IS NOT NULL),
               array_agg(f.carrier_run_id ORDER BY f.index)
                   FILTER (WHERE f.carrier_run_id IS NOT NULL),
               array_agg(f.index ORDER BY f.index) FILTER (WHERE f.oversized),
               array_agg(f.index ORDER BY f.index) FILTER (WHERE f.state = 'TRIGGERED'),
               array_agg(f.index ORDER BY f.index)
                   FILTER (WHERE f.state = 'PENDING' AND NOT f.oversized
                           AND f.carrier_run_id IS NULL),
               count(*)
        INTO new_indexes, new_carriers, big_indexes, made_indexes, refused_indexes, inserted
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
            inserted := 0;
        END IF;
    END IF;
    IF new_indexes IS NOT NULL THEN
        attempts := {schema}.numeric_setting('batch_item_max_attempts', 8)::integer;
        INSERT INTO {schema}.runs (id, environment, queue, task, payload, status, max_attempts)
        SELECT n.carrier, b.environment, '__batches__', 'fairlane.batch_item',
               jsonb_build_object('batch_id', target, 'index', n.idx), 'QUEUED',
               greatest(attempts, 1)
        FROM unnest(new_indexes, new_carriers) AS n(idx, carrier)
        ORDER BY n.idx;
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
    IF inserted > 0 THEN
        UPDATE {schema}.batches AS x SET received = x.received + inserted
        WHERE x.id = target
        RETURNING x.received INTO total;
    ELSE
        SELECT x.received INTO total FROM {schema}.batches x WHERE x.id = target;
    END IF;
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

-- name: ingest_batch_items
-- params: batch_id bigint, indexes integer[], tasks text[], payloads text[], options text[],
-- params: oversized boolean[], made bigint[], refusals text[]
SELECT accepted, received, run_count, sealed, status
FROM {schema}.ingest_batch_items(
    %(batch_id)s, %(indexes)s::integer[], %(tasks)b::text[], %(payloads)b::text[],
    %(options)b::text[], %(oversized)s::boolean[], %(made)s::bigint[], %(refusals)s::text[]);

-- name: lock_batch_item
-- params: batch_id bigint, index integer, environment text
-- The carrier's transaction: the item under its row lock, with what triggering it needs. Only
-- an item of a batch of the carrier's own environment: another's is not there for it, as a
-- missing item (docs/security.md).
SELECT i.state, i.task, i.payload, i.options, b.environment, b.status, b.parent_run_id
FROM {schema}.batch_items i JOIN {schema}.batches b ON b.id = i.batch_id
WHERE i.batch_id = %(batch_id)s AND i.index = %(index)s AND b.environment = %(environment)s
FOR UPDATE OF i;

-- name: skip_batch_item
-- params: batch_id bigint, index integer
UPDATE {schema}.batch_items SET state = 'SKIPPED'
WHERE batch_id = %(batch_id)s AND index = %(index)s AND state = 'PENDING';

-- name: record_batch_item
-- params: batch_id bigint, index integer, run_id bigint
SELECT {schema}.record_batch_item(%(batch_id)s, %(index)s, %(run_id)s, true, NULL);

-- name: fail_batch_item
-- params: batch_id bigint, index integer, code text, message text
SELECT {schema}.fail_batch_item(%(batch_id)s, %(index)s, %(code)s, %(message)s);

-- name: batch_item_max_bytes
SELECT {schema}.numeric_setting('batch_item_max_bytes', 3145728)::bigint;
