-- Periodic job: debounce keys whose run has started or ended are deleted.

-- function: prune_debounce_keys
-- Periodic: delete keys whose run has started, ended or gone; the next trigger of such a key
-- makes a new run anyway, so they only take space. Rows are locked first (SKIP LOCKED: a
-- trigger holding one is using it) and re-checked in a later statement, whose fresh snapshot
-- sees a run a trigger pointed the key at after the first statement's snapshot was taken.
CREATE OR REPLACE FUNCTION {schema}.prune_debounce_keys()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    envs text[];
    tasks text[];
    keys text[];
    pruned integer;
BEGIN
    WITH stale AS (
        SELECT k.environment, k.task, k.key
        FROM {schema}.debounce_keys k
        WHERE NOT EXISTS (SELECT 1 FROM {schema}.runs r
                          WHERE r.id = k.run_id AND r.status = 'DELAYED' AND r.attempts = 0)
        LIMIT {schema}.numeric_setting('debounce_prune_batch_size', 5000)::integer
        FOR UPDATE SKIP LOCKED
    )
    SELECT array_agg(environment), array_agg(task), array_agg(key)
    INTO envs, tasks, keys
    FROM stale;
    DELETE FROM {schema}.debounce_keys k
    USING unnest(envs, tasks, keys) AS s(environment, task, key)
    WHERE k.environment = s.environment AND k.task = s.task AND k.key = s.key
      AND NOT EXISTS (SELECT 1 FROM {schema}.runs r
                      WHERE r.id = k.run_id AND r.status = 'DELAYED' AND r.attempts = 0);
    GET DIAGNOSTICS pruned = ROW_COUNT;
    RETURN jsonb_build_object('pruned', pruned);
END;
$$;
