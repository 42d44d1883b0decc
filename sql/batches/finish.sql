-- A batch ends when every item became a run; the runs waiting on it then wait on those runs.

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

-- function: attach_batch_runs
-- A run waiting on a batch waits on the runs of its items too, so it resumes when every item's
-- run is final, with one result per item (edges at the item's index, for the attempt that made
-- the batch's own edge, which is at item -1). Called once the batch's waitpoint is complete
-- (finish_batch, the abort), for every run waiting on it, and by a run that starts to wait on
-- a batch that has already ended (`waiter`: just that run). The batch's waitpoint row is the
-- meeting point: the ones that complete it update it before they attach, a waiter locks it FOR
-- SHARE before it decides, so either the waiter's edge is committed and seen here, or the
-- waiter sees it complete.
CREATE OR REPLACE FUNCTION {schema}.attach_batch_runs(target bigint, waiter bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    batch_waitpoint bigint;
    item_runs bigint[];
    item_waitpoints bigint[];
    attached integer;
BEGIN
    SELECT b.waitpoint_id INTO batch_waitpoint FROM {schema}.batches b WHERE b.id = target;
    -- A waiter attaches itself only to a batch that has ended (it holds the waitpoint's row
    -- FOR SHARE, so whoever completes it waits for its commit, and then attaches it).
    IF waiter IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM {schema}.waitpoints w
        WHERE w.id = batch_waitpoint AND w.status = 'COMPLETED') THEN
        RETURN 0;
    END IF;
    IF batch_waitpoint IS NULL OR NOT EXISTS (
        SELECT 1 FROM {schema}.run_waitpoints e
        WHERE e.waitpoint_id = batch_waitpoint AND e.item = -1
          AND (waiter IS NULL OR e.run_id = waiter)) THEN
        RETURN 0;
    END IF;
    -- Locked like awaited runs (descending id), then their waitpoints found or made.
    SELECT array_agg(locked.id) INTO item_runs
    FROM (SELECT r.id FROM {schema}.runs r
          WHERE r.id IN (SELECT i.run_id FROM {schema}.batch_items i
                         WHERE i.batch_id = target AND i.run_id IS NOT NULL)
          ORDER BY r.id DESC
          FOR UPDATE) AS locked;
    IF item_runs IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(made.run_id), array_agg(made.waitpoint_id)
    INTO item_runs, item_waitpoints
    FROM {schema}.ensure_run_waitpoints(item_runs) AS made;
    INSERT INTO {schema}.run_waitpoints (run_id, attempt, position, item, waitpoint_id)
    SELECT e.run_id, e.attempt, e.position, i.index, made.waitpoint_id
    FROM {schema}.run_waitpoints e
    CROSS JOIN {schema}.batch_items i
    JOIN unnest(item_runs, item_waitpoints) AS made(run_id, waitpoint_id)
      ON made.run_id = i.run_id
    WHERE e.waitpoint_id = batch_waitpoint AND e.item = -1
      AND (waiter IS NULL OR e.run_id = waiter)
      AND i.batch_id = target
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS attached = ROW_COUNT;
    RETURN attached;
END;
$$;

-- name: attach_batch_waiter
-- params: batch_id bigint, run_id bigint
-- A run that starts to wait on a batch that has already ended waits on its items' runs.
SELECT {schema}.attach_batch_runs(%(batch_id)s, %(run_id)s);

-- name: batch_waitpoint
-- params: batch_id bigint, environment text
-- The waitpoint of a batch a handler waits on, if the batch is of the handler's environment:
-- another's answers as a missing batch (docs/security.md).
SELECT waitpoint_id FROM {schema}.batches
WHERE id = %(batch_id)s AND environment = %(environment)s;
