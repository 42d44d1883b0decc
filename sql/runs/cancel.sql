-- Cancelling a run, and with it every run below it (runs record their parent_run_id).

-- function: cancel_run
-- A run that has not ended ends CANCELED at once, whatever its state, and so does every
-- descendant that has not ended. An EXECUTING run loses its lease token in the same statement:
-- the fence then refuses whatever its worker writes later (heartbeat, complete, fail), and the
-- worker, told on the `<schema>.cancel` channel (payload: the run id), cancels the handler at
-- once. Without LISTEN the worker learns it at its next heartbeat, which finds the lease gone.
-- A final run is left alone: the row says canceled = false and which final status it has.
-- No row: no such run.
CREATE OR REPLACE FUNCTION {schema}.cancel_run(target bigint)
RETURNS TABLE (previous_status text, canceled boolean, descendants integer)
LANGUAGE plpgsql
-- The runs are read by index only, whatever the statistics say: on a table autovacuum has not
-- analysed yet, the walk hashed the whole table once per level, and a bulk cancel of a few
-- thousand runs ran into the statement timeout (tests/sql/test_bulk_cancel_plan.py). Without
-- statistics the walk's estimate is the table's, not the tree's: past jit_above_cost every
-- call compiled its plan, which cost twenty times what the walk itself did.
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    current_status text;
    tree bigint[];
    below integer;
BEGIN
    SELECT r.status INTO current_status FROM {schema}.runs r WHERE r.id = target;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- The walk goes through ended runs too: a finished child may have live children. Each
    -- run's children are looked up on their own (LATERAL; OFFSET 0 keeps it from being
    -- flattened into a join), so runs_parent_idx is probed once per run of the tree and the
    -- cost is the tree's, not the table's.
    WITH RECURSIVE walk(id) AS (
        SELECT target
        UNION
        SELECT child.id
        FROM walk
        CROSS JOIN LATERAL (SELECT c.id FROM {schema}.runs c
                            WHERE c.parent_run_id = walk.id OFFSET 0) AS child
    )
    SELECT array_agg(walk.id) INTO tree FROM walk;
    -- Descendants before ancestors (a child is always made after its parent: id descending),
    -- the order a completion takes them in (the finishing child, then the parent waiting on
    -- it), so a cancel and a child's completion wait for each other instead of deadlocking.
    PERFORM 1 FROM {schema}.runs r
    WHERE r.id = ANY(tree) AND r.status IN ('DELAYED', 'QUEUED', 'EXECUTING', 'WAITING')
    ORDER BY r.id DESC
    FOR UPDATE;
    -- Decided after the locks: the run may have ended while this cancel waited for them.
    SELECT r.status INTO current_status FROM {schema}.runs r WHERE r.id = target;
    IF current_status NOT IN ('DELAYED', 'QUEUED', 'EXECUTING', 'WAITING') THEN
        RETURN QUERY SELECT current_status, false, 0;
        RETURN;
    END IF;
    WITH ended AS (
        UPDATE {schema}.runs r
        SET status = 'CANCELED',
            finished_at = now(),
            lease_token = NULL,
            lease_until = NULL,
            error = jsonb_build_object(
                'type', 'Canceled',
                'code', 'CANCELED',
                'message', CASE WHEN r.id = target THEN 'run was canceled'
                                ELSE 'ancestor run ' || target || ' was canceled' END)
        FROM {schema}.runs AS was
        WHERE was.id = r.id
          AND r.id = ANY(tree)
          AND r.status IN ('DELAYED', 'QUEUED', 'EXECUTING', 'WAITING')
        RETURNING r.id, was.status AS was
    ), told AS (
        SELECT pg_notify({cancel_channel}, ended.id::text)
        FROM ended WHERE ended.was IN ('EXECUTING', 'WAITING')
    )
    SELECT count(*) FILTER (WHERE ended.id <> target) INTO below
    FROM ended
    WHERE (SELECT count(*) FROM told) >= 0;
    RETURN QUERY SELECT current_status, true, below;
END;
$$;

-- name: cancel_run
-- params: id bigint
SELECT previous_status, canceled, descendants FROM {schema}.cancel_run(%(id)s);

-- name: cancel_runs
-- params: ids bigint[]
-- cancel_run for each id, in the order given (descending: the global lock order).
SELECT t.id, c.previous_status, c.canceled, c.descendants
FROM unnest(%(ids)s::bigint[]) WITH ORDINALITY AS t(id, n)
CROSS JOIN LATERAL {schema}.cancel_run(t.id) AS c
ORDER BY t.n;
