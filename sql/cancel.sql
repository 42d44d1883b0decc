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
AS $$
#variable_conflict use_column
DECLARE
    current_status text;
    below integer;
BEGIN
    SELECT r.status INTO current_status FROM {schema}.runs r WHERE r.id = target FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF current_status NOT IN ('DELAYED', 'QUEUED', 'EXECUTING', 'WAITING') THEN
        RETURN QUERY SELECT current_status, false, 0;
        RETURN;
    END IF;
    -- Locked in id order, so overlapping cancels (a parent and its child at once) cannot
    -- deadlock. The walk goes through ended runs too: a finished child may have live children.
    WITH RECURSIVE tree(id) AS (
        SELECT target
        UNION
        SELECT c.id FROM {schema}.runs c JOIN tree ON c.parent_run_id = tree.id
    ), doomed AS (
        SELECT r.id, r.status
        FROM {schema}.runs r JOIN tree ON tree.id = r.id
        WHERE r.status IN ('DELAYED', 'QUEUED', 'EXECUTING', 'WAITING')
        ORDER BY r.id
        FOR UPDATE OF r
    ), ended AS (
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
        FROM doomed
        WHERE r.id = doomed.id
        RETURNING r.id, doomed.status AS was
    ), told AS (
        SELECT pg_notify({cancel_channel}, ended.id::text) FROM ended WHERE ended.was IN ('EXECUTING', 'WAITING')
    )
    SELECT count(*) FILTER (WHERE ended.id <> target) INTO below
    FROM ended
    WHERE (SELECT count(*) FROM told) >= 0;
    RETURN QUERY SELECT current_status, true, below;
END;
$$;

-- name: cancel_run
SELECT previous_status, canceled, descendants FROM {schema}.cancel_run(%(id)s);
