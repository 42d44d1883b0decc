-- A claim's rounds and the start of what it picked (sql/claim/claim.sql says how a claim
-- goes).

-- function: claim_round
-- One round of a claim: lock what it can of `page_names` (SKIP LOCKED; with `wait`, the one
-- environment named, waiting for its row), and pick from every environment locked in one
-- statement, up to a turn's share each (`quantum`, or an even split of `remaining` when that
-- is more), keeping the first `remaining` picks in turn order. A locking read returns each
-- row's latest version, so a pause or a limit that committed after the page was read is seen.
-- Returns the environments locked, the share, what each gave, the picked runs in turn order,
-- the names it could not lock, and those that gave their whole share (`again`: a lap may ask
-- them for more).
-- With `joining`, the names are environments a notification announced, and the round takes
-- only the drained ones (checked on the row's latest version): they join by being served,
-- without a write of their own before it (claim_runs levels them when it charges them, and
-- leaves one it found without a queued run as it was). The others are not its to visit: an
-- active one is in the turn order, and one held by another claim is that claim's, so none of
-- them is counted as skipped.
CREATE OR REPLACE FUNCTION {schema}.claim_round(
    page_names text[], remaining integer,
    quantum integer, only_queues text[], only_tasks text[], floor_environments text[],
    floor_queues text[], floor_orders timestamptz[], floor_ids bigint[],
    wait boolean DEFAULT false, joining boolean DEFAULT false,
    OUT names text[], OUT share integer, OUT taken integer[], OUT picked bigint[],
    OUT skipped text[], OUT again text[])
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    limits integer[];
    bursts numeric[];
    paused boolean[];
BEGIN
    IF wait THEN
        SELECT ARRAY[e.name], ARRAY[e.concurrency_limit], ARRAY[e.burst_factor], ARRAY[e.paused]
        INTO names, limits, bursts, paused
        FROM {schema}.environments e WHERE e.name = page_names[1] FOR UPDATE;
        skipped := '{{}}';
    ELSE
        -- A page's names are unique: aggregates FILTERed on the row found keep the arrays
        -- aligned, and the names not found are the ones other claimers hold.
        SELECT array_agg(e.name ORDER BY page.turn) FILTER (WHERE e.name IS NOT NULL),
               array_agg(e.concurrency_limit ORDER BY page.turn) FILTER (WHERE e.name IS NOT NULL),
               array_agg(e.burst_factor ORDER BY page.turn) FILTER (WHERE e.name IS NOT NULL),
               array_agg(e.paused ORDER BY page.turn) FILTER (WHERE e.name IS NOT NULL),
               coalesce(array_agg(page.name ORDER BY page.turn) FILTER (WHERE e.name IS NULL),
                        '{{}}')
        INTO names, limits, bursts, paused, skipped
        FROM unnest(page_names) WITH ORDINALITY AS page(name, turn)
        LEFT JOIN LATERAL (SELECT e.name, e.concurrency_limit, e.burst_factor, e.paused
                           FROM {schema}.environments e WHERE e.name = page.name
                             AND (NOT joining OR e.drained)
                           FOR UPDATE SKIP LOCKED) AS e ON true;
        IF joining THEN
            skipped := '{{}}';
        END IF;
    END IF;
    IF names IS NULL THEN
        RETURN;
    END IF;
    share := least(remaining, greatest(quantum, ceil(remaining::numeric / cardinality(names))))::integer;
    -- One statement: the picks kept (the first `remaining` in turn order), what each
    -- environment gave, and which gave their whole share.
    WITH kept AS MATERIALIZED (
        SELECT p.id, p.turn, p.nth
        FROM (SELECT picks.id, picks.turn,
                     row_number() OVER (ORDER BY picks.turn, picks.queue_order, picks.id)
                         AS nth
              FROM {schema}.pick_runs(names, limits, bursts, paused, share, only_queues,
                                      only_tasks, floor_environments, floor_queues,
                                      floor_orders, floor_ids) AS picks) AS p
        WHERE p.nth <= remaining
    )
    SELECT (SELECT coalesce(array_agg(k.id ORDER BY k.nth), '{{}}') FROM kept k),
           given.taken, given.again
    INTO picked, taken, again
    FROM (SELECT array_agg(coalesce(c.n, 0) ORDER BY x.turn) AS taken,
                 coalesce(array_agg(x.name ORDER BY x.turn) FILTER (WHERE c.n >= share),
                          '{{}}') AS again
          FROM unnest(names) WITH ORDINALITY AS x(name, turn)
          LEFT JOIN (SELECT k.turn, count(*)::integer AS n FROM kept k GROUP BY k.turn) AS c
              ON c.turn = x.turn) AS given;
END;
$$;

-- function: start_picked_runs
-- Start the runs a claim picked, in the order it picked them; the attempt is counted here, but
-- not for a run that waited without a worker and is resumed (resume_ready: mark_runs_ready).
-- replay says whether the run has recorded calls (sql/waitpoints/steps.sql) to replay. A run of
-- a queue with a rate takes a token of its key's bucket (sql/claim/key_rates.sql). The started
-- runs are announced to the event streams here, a notice per 300 (sql/realtime/changes.sql).
-- The runs are found through an index condition on the primary key: joined on id alone, the
-- plan a session keeps from claims made while the table held a few runs hashed the picked ids
-- and scanned the whole table on every later claim (tests/sql/test_plans_after_growth.py). It
-- runs with the claim's settings (claim_runs: a generic plan from the first claim): a setting
-- of its own would cost every call. `first_turn` (claim_runs') comes back on the last run's row
-- alone, NULL on the others: a value on each of a claim's thousands of rows would cost the
-- worker a timestamp to read per run.
CREATE OR REPLACE FUNCTION {schema}.start_picked_runs(
    picked bigint[], lease_s double precision, claimer text, first_turn text DEFAULT NULL)
RETURNS TABLE (id bigint, lease_token uuid, task text, payload jsonb, attempts integer,
               max_attempts integer, environment text, queue text, metadata jsonb,
               machine text, max_duration_s double precision, queue_order timestamptz,
               wait_attempt integer, replay boolean, turn text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    -- This statement announces the runs it starts: the row trigger passes over them
    -- (sql/realtime/changes.sql).
    PERFORM set_config('fairlane.runs_announced', 'on', true);
    RETURN QUERY
    WITH started AS (
        UPDATE {schema}.runs AS r
        SET status = 'EXECUTING',
            attempts = r.attempts + CASE WHEN r.resume_ready THEN 0 ELSE 1 END,
            resume_ready = false,
            lease_token = gen_random_uuid(),
            lease_until = now() + make_interval(secs => lease_s),
            worker_id = claimer,
            started_at = now(),
            -- Started: the TTL is spent, so nothing that hands the run back can expire it.
            expires_at = NULL
        FROM unnest(picked) WITH ORDINALITY AS p(id, nth)
        WHERE r.id = p.id AND r.id = ANY(picked)
        RETURNING r.id, r.lease_token, r.task, r.payload, r.attempts, r.max_attempts,
                  r.environment, r.queue, r.metadata, r.machine, r.max_duration_s,
                  r.queue_order, r.wait_attempt, r.concurrency_key, p.nth
    ), rated AS (
        -- The queues started in that have a rate: each started run takes a token of its key's
        -- bucket (sql/claim/key_rates.sql). Few rows: one per queue started in.
        SELECT q.environment, q.name, coalesce(q.rate_period_s, 1) / q.rate_limit AS per_run_s
        FROM {schema}.queues q
        WHERE (q.environment, q.name) IN (SELECT s.environment, s.queue FROM started s)
          AND q.rate_limit IS NOT NULL
    ), charged AS (
        -- Skipped whole, in one probe of queues_rate_idx, while no queue has a rate: the join
        -- would look up every started run's queue.
        INSERT INTO {schema}.rate_buckets AS b (environment, queue, concurrency_key, full_at)
        SELECT s.environment, s.queue, coalesce(s.concurrency_key, ''),
               statement_timestamp() + make_interval(secs => count(*) * rated.per_run_s)
        FROM started s
        JOIN rated ON rated.environment = s.environment AND rated.name = s.queue
        WHERE EXISTS (SELECT 1 FROM {schema}.queues any_rated
                      WHERE any_rated.rate_limit IS NOT NULL)
        GROUP BY s.environment, s.queue, coalesce(s.concurrency_key, ''), rated.per_run_s
        ON CONFLICT (environment, queue, concurrency_key) DO UPDATE
        SET full_at = greatest(b.full_at, statement_timestamp())
                      + (excluded.full_at - statement_timestamp())
    ), announced AS (
        -- For the event streams, a notice per 300 runs.
        SELECT {schema}.announce_runs(array_agg(s.id)) FROM started s
    )
    SELECT s.id, s.lease_token, s.task, s.payload, s.attempts, s.max_attempts,
           s.environment, s.queue, s.metadata, s.machine, s.max_duration_s, s.queue_order,
           s.wait_attempt,
           EXISTS (SELECT 1 FROM {schema}.run_steps AS step WHERE step.run_id = s.id),
           CASE WHEN s.nth = cardinality(picked) THEN first_turn END
    FROM started s
    WHERE (SELECT count(*) FROM announced) >= 0
    ORDER BY s.nth;
END;
$$;
