-- Pruning: history is kept for prune_retention_s, then deleted in batches (prune_batch_size
-- rows per statement), so the hot tables stay small without long locks. A tick deletes until
-- it is caught up, or prune_budget_s is spent, or prune_max_batches statements ran; when it
-- stopped with work left the runner makes it due again at once, so pruning keeps up with any
-- rate the engine runs at (docs/decisions.md). Nothing that is still promised goes: a
-- finished run holding an active idempotency key (one that ended COMPLETED or CANCELED: the
-- others free theirs) stays until the key expires, and the retention counts from there; a run
-- of a batch still in progress stays (the batch reads its runs when it ends); a waitpoint
-- stays while a wait edge points to it (a time waitpoint goes with the run it was made for,
-- due or not).

-- function: prune_finished_runs
-- Finished runs, their wait edges and the waitpoints only they needed (prune_runs_batch, by
-- repeat_in_batches), then completed tokens that are due. Settings: prune_retention_s,
-- prune_batch_size runs per statement, prune_budget_s seconds and prune_max_batches
-- statements per tick. `behind` when either part stopped with work left.
CREATE OR REPLACE FUNCTION {schema}.prune_finished_runs()
RETURNS jsonb
LANGUAGE plpgsql
-- Runs are read by index only: the plan a worker keeps from its first tick, on a table of a
-- few runs, would otherwise scan the whole table on every later one (as the fenced writes
-- did: tests/sql/test_plans_after_growth.py).
SET enable_seqscan = off
AS $$
DECLARE
    batch_size integer := {schema}.numeric_setting('prune_batch_size', 1000);
    outcome jsonb;
    tokens integer;
BEGIN
    outcome := {schema}.repeat_in_batches(
        'prune_runs_batch', batch_size,
        {schema}.numeric_setting('prune_max_batches', 100)::integer,
        {schema}.numeric_setting('prune_budget_s', 1));
    tokens := {schema}.prune_tokens({schema}.prune_cutoff(), batch_size);
    RETURN outcome || jsonb_build_object(
        'waitpoints', (outcome ->> 'waitpoints')::integer + tokens,
        'behind', (outcome ->> 'behind')::boolean OR tokens >= batch_size);
END;
$$;

-- function: prune_cutoff
-- What finished before this (the tick's start, less the retention) is due.
CREATE OR REPLACE FUNCTION {schema}.prune_cutoff()
RETURNS timestamptz
LANGUAGE sql
STABLE
AS $$
SELECT now() - make_interval(secs => {schema}.numeric_setting('prune_retention_s', 604800));
$$;

-- function: prune_runs_batch
-- One batch of finished runs that are due, with their edges and the waitpoints only they
-- needed. The expression is the one of runs_prunable_idx, so the scan reads only what is due
-- (and the runs of batches in progress, which it skips: few, and only while their batch is).
CREATE OR REPLACE FUNCTION {schema}.prune_runs_batch(batch_size integer)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    cutoff timestamptz := {schema}.prune_cutoff();
    pruned bigint[];
    waitpoints integer := 0;
BEGIN
    WITH old AS (
        SELECT r.id
        FROM {schema}.runs r
        WHERE greatest(r.finished_at,
                       CASE WHEN r.idempotency_key IS NOT NULL
                                 AND r.status IN ('COMPLETED', 'CANCELED')
                            THEN r.idempotency_key_expires_at END) < cutoff
          AND r.finished_at IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM {schema}.batches b
                          WHERE b.id = r.batch_id AND b.status IN ('PENDING', 'PROCESSING'))
        ORDER BY greatest(r.finished_at,
                          CASE WHEN r.idempotency_key IS NOT NULL
                                    AND r.status IN ('COMPLETED', 'CANCELED')
                               THEN r.idempotency_key_expires_at END)
        LIMIT batch_size
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM {schema}.runs AS r USING old WHERE r.id = old.id RETURNING r.id
    )
    SELECT array_agg(gone.id) INTO pruned FROM gone;
    IF pruned IS NOT NULL THEN
        waitpoints := {schema}.prune_wait_edges(pruned, cutoff);
    END IF;
    RETURN jsonb_build_object('rows', coalesce(cardinality(pruned), 0),
                              'deleted', coalesce(cardinality(pruned), 0),
                              'waitpoints', waitpoints);
END;
$$;

-- function: prune_wait_edges
-- The wait edges of pruned runs go with them; the waitpoints those edges or runs pointed to
-- go too once no edge points to them (a RUN waitpoint once its run is gone, a token once it is
-- due itself, a time whether or not it came due: it was made for the one run that waited on
-- it, which may have been cancelled long before its time). Candidates are locked first,
-- skipping any a waiter holds (it locks a waitpoint before it adds its edge) or the due-time
-- job is completing; the NOT EXISTS is a later statement, so it sees committed edges.
CREATE OR REPLACE FUNCTION {schema}.prune_wait_edges(pruned bigint[], cutoff timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    candidates bigint[];
    removed integer;
BEGIN
    WITH edges AS (
        DELETE FROM {schema}.run_waitpoints AS e WHERE e.run_id = ANY(pruned)
        RETURNING e.waitpoint_id
    )
    SELECT array_agg(DISTINCT id) INTO candidates
    FROM (SELECT waitpoint_id AS id FROM edges
          UNION ALL
          SELECT w.id FROM {schema}.waitpoints w
          WHERE w.kind = 'RUN' AND w.run_id = ANY(pruned)) AS touched;
    IF candidates IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(l.id) INTO candidates
    FROM (SELECT w.id FROM {schema}.waitpoints w
          WHERE w.id = ANY(candidates) AND (w.status = 'COMPLETED' OR w.kind = 'DATETIME')
          ORDER BY w.id
          FOR UPDATE SKIP LOCKED) AS l;
    DELETE FROM {schema}.waitpoints AS w
    WHERE w.id = ANY(candidates)
      AND NOT EXISTS (SELECT 1 FROM {schema}.run_waitpoints e WHERE e.waitpoint_id = w.id)
      AND CASE w.kind
              WHEN 'RUN' THEN NOT EXISTS (SELECT 1 FROM {schema}.runs r WHERE r.id = w.run_id)
              WHEN 'MANUAL' THEN greatest(w.completed_at, CASE WHEN w.idempotency_key IS NOT NULL
                                                               THEN w.idempotency_expires_at END)
                                 < cutoff
              -- A batch's waitpoint completes when its batch ends; the batch pruner takes it.
              WHEN 'BATCH' THEN w.completed_at < cutoff
              ELSE true
          END;
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END;
$$;

-- function: prune_tokens
-- Completed tokens due (retention counted from completion, or from their key's expiry while
-- the key is active) that no edge points to: tokens nobody waited on, or whose waiters are
-- gone. Locked first (SKIP LOCKED: a waiter holds the ones it is about to wait on), decided
-- in a later statement.
CREATE OR REPLACE FUNCTION {schema}.prune_tokens(cutoff timestamptz, batch_size integer)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    due bigint[];
    removed integer;
BEGIN
    SELECT array_agg(l.id) INTO due
    FROM (SELECT w.id FROM {schema}.waitpoints w
          WHERE w.kind = 'MANUAL' AND w.status = 'COMPLETED'
            AND greatest(w.completed_at, CASE WHEN w.idempotency_key IS NOT NULL
                                              THEN w.idempotency_expires_at END) < cutoff
          ORDER BY greatest(w.completed_at, CASE WHEN w.idempotency_key IS NOT NULL
                                                 THEN w.idempotency_expires_at END)
          LIMIT batch_size
          FOR UPDATE SKIP LOCKED) AS l;
    IF due IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM {schema}.waitpoints AS w
    WHERE w.id = ANY(due)
      AND NOT EXISTS (SELECT 1 FROM {schema}.run_waitpoints e WHERE e.waitpoint_id = w.id);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END;
$$;

-- function: prune_finished_batches
-- Batches that ended (COMPLETED, PARTIAL_FAILED, ABORTED) more than the retention ago go with
-- their items and their waitpoint (unless a wait edge still points to it). Their runs are
-- history of their own and are pruned as runs.
CREATE OR REPLACE FUNCTION {schema}.prune_finished_batches()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    cutoff timestamptz := {schema}.prune_cutoff();
    batch_size integer := {schema}.numeric_setting('prune_batch_size', 1000);
    old bigint[];
    waitpoints bigint[];
    items integer;
    batches integer;
BEGIN
    SELECT array_agg(l.id), array_agg(l.waitpoint_id) FILTER (WHERE l.waitpoint_id IS NOT NULL)
    INTO old, waitpoints
    FROM (SELECT b.id, b.waitpoint_id FROM {schema}.batches b
          WHERE b.completed_at < cutoff
          ORDER BY b.completed_at
          LIMIT batch_size
          FOR UPDATE SKIP LOCKED) AS l;
    IF old IS NULL THEN
        RETURN jsonb_build_object('batches', 0, 'items', 0, 'behind', false);
    END IF;
    DELETE FROM {schema}.batch_items AS i WHERE i.batch_id = ANY(old);
    GET DIAGNOSTICS items = ROW_COUNT;
    DELETE FROM {schema}.batches AS b WHERE b.id = ANY(old);
    GET DIAGNOSTICS batches = ROW_COUNT;
    -- A waiter locks a batch's waitpoint before it adds its edge: skip the ones it holds.
    SELECT array_agg(l.id) INTO waitpoints
    FROM (SELECT w.id FROM {schema}.waitpoints w WHERE w.id = ANY(waitpoints)
          ORDER BY w.id FOR UPDATE SKIP LOCKED) AS l;
    DELETE FROM {schema}.waitpoints AS w
    WHERE w.id = ANY(waitpoints)
      AND NOT EXISTS (SELECT 1 FROM {schema}.run_waitpoints e WHERE e.waitpoint_id = w.id);
    RETURN jsonb_build_object('batches', batches, 'items', items,
                              'behind', cardinality(old) >= batch_size);
END;
$$;
