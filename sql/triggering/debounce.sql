-- Debounce: one row per (environment, task, key) in debounce_keys names the key's current run.
-- A debounced trigger locks that row for the rest of its transaction, so triggers of one key
-- are decided one after another, each seeing what the one before it committed; the seeds'
-- pending claims, polling and compare-and-set have no counterpart here.

-- function: lock_debounce_key
-- Lock the debounce key of every (envs[i], tasks[i], keys[i]), making the rows of new ones, in
-- (environment, task, key) order, for the rest of the transaction. One statement in key order:
-- an existing row is locked by ON CONFLICT DO UPDATE (whose WHERE false updates nothing but
-- locks the row, waiting for whoever holds it); a row another trigger is inserting is waited
-- for like a lock, and found (and locked) once that trigger commits, or inserted if it rolled
-- back, or if the pruner deleted it meanwhile. The caller then reads each key's run in a later
-- statement, which sees what the key's previous holder committed.
-- (plpgsql rather than sql: its plan is kept for the session.)
CREATE OR REPLACE FUNCTION {schema}.lock_debounce_key(envs text[], tasks text[], keys text[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO {schema}.debounce_keys AS k (environment, task, key)
    SELECT DISTINCT given.environment, given.task, given.key
    FROM unnest(envs, tasks, keys) AS given(environment, task, key)
    ORDER BY given.environment, given.task, given.key
    ON CONFLICT (environment, task, key) DO UPDATE SET run_id = k.run_id WHERE false;
END;
$$;

-- function: join_debounced_run
-- With the key locked: push the key's run to start no earlier than now + delay_s and, in
-- trailing mode, give it this trigger's payload, and its metadata, tags, max_attempts,
-- max_duration and machine where the trigger gave them (NULL: not given, the run keeps its
-- own), as the seeds' engine does. Returns false, changing nothing, when a new run must be made
-- instead: the run is gone or has started (it is not DELAYED, or it is a retry's backoff), or
-- the new start would be later than its creation + max_delay_s (else the debounce_max_delay_s
-- setting, 10 minutes). The run's row lock keeps delayed promotion (SKIP LOCKED) and cancel off
-- it until commit.
CREATE OR REPLACE FUNCTION {schema}.join_debounced_run(
    target bigint, delay_s float8, max_delay_s float8, trailing_mode boolean, new_payload jsonb,
    new_metadata jsonb, new_tags text[], new_max_attempts integer, new_max_duration_s float8,
    new_machine text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    debounced record;
    start_at timestamptz := now() + make_interval(secs => delay_s);
    window_s float8 := coalesce(max_delay_s,
                                {schema}.numeric_setting('debounce_max_delay_s', 600));
BEGIN
    SELECT r.status, r.attempts, r.created_at INTO debounced
    FROM {schema}.runs r WHERE r.id = target
    FOR UPDATE;
    IF NOT FOUND OR debounced.status <> 'DELAYED' OR debounced.attempts > 0
       OR start_at > debounced.created_at + make_interval(secs => window_s) THEN
        RETURN false;
    END IF;
    UPDATE {schema}.runs r
    SET available_at = greatest(r.available_at, start_at),
        payload = CASE WHEN trailing_mode THEN new_payload ELSE r.payload END,
        metadata = CASE WHEN trailing_mode THEN coalesce(new_metadata, r.metadata)
                        ELSE r.metadata END,
        tags = CASE WHEN trailing_mode THEN coalesce(new_tags, r.tags) ELSE r.tags END,
        max_attempts = CASE WHEN trailing_mode THEN coalesce(new_max_attempts, r.max_attempts)
                            ELSE r.max_attempts END,
        max_duration_s = CASE WHEN trailing_mode
                              THEN coalesce(new_max_duration_s, r.max_duration_s)
                              ELSE r.max_duration_s END,
        machine = CASE WHEN trailing_mode THEN coalesce(new_machine, r.machine) ELSE r.machine END
    WHERE r.id = target;
    RETURN true;
END;
$$;
