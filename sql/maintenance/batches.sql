-- Periodic job: the batches' seal timeout, and items whose carrier ended without their run.

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
-- Runs are read by index only: the plan a worker keeps from its first tick, on a table of a
-- few runs, would otherwise scan the whole table on every later one (as the fenced writes
-- did: tests/sql/test_plans_after_growth.py).
SET enable_seqscan = off
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
            AND r.status = ANY({schema}.final_statuses())
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
                           || b.received || ' of ' || b.run_count
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
