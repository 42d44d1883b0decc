-- The fair claim, as functions (installed by fairlane migrate); the worker calls
-- claim_runs().
--
-- Slots are derived, never counted separately: a run holds a slot exactly while it is
-- EXECUTING, so every end of a run (complete, fail, retry, lease lapse, cancel, wait) releases
-- its slot in the same transaction that changes its status, and nothing can leak. Counts are
-- read under the environment's row lock, taken in a statement before the count, so each count
-- sees every claim committed before it (READ COMMITTED gives each statement a fresh snapshot).
--
-- Fairness is deficit round robin in its virtual-time form: environments.served counts the runs
-- an environment was handed. Each claim serves the environments with claimable runs in order
-- of least service, at most `quantum` runs each per turn while others wait. An environment's
-- deficit is how far its service lags the most-served active environment; it is capped at
-- `max_deficit`, so one that sat at its cap gets its turn back but cannot monopolise. One that
-- was drained rejoins level with the least-served active environment: no credit for idleness.
--
-- A claim may carry floors, one per queue: the queue order and id of the last run the worker
-- claimed there. The queue's walk starts after it instead of at the head of the queued index,
-- where every run claimed since the last vacuum leaves a dead entry (a deep backlog's drain
-- leaves hundreds of thousands, and walking them grew each claim by half over a 1M drain). A
-- floor is a hint: a run that sorts before it (a higher priority, a run handed back) is seen
-- by the next claim without floors, and the worker sends none in every full scan and after
-- any claim that came back short.
--
-- A claim may name tasks, those its worker has handlers for: it takes only their runs, and a
-- run of another task waits for a worker that has it. The filter is a condition on the rows
-- each queue's walk reads, not a key of the queued index: runs of other tasks ahead of the
-- claimer's are read and passed over by every walk from the head (floors skip them between
-- full scans; docs/decisions.md says why no index). Whether an environment is drained is
-- decided on every task's runs, and only runs taken are charged, so a claimer that serves
-- none of an environment's runs leaves it to the claimers that do.
--
-- The active environments are the ones with environments.drained false: an environment a scan
-- of the queued index finds with work becomes active (charged by the claim that serves it, or
-- marked), and the claim that leaves it empty marks it drained. A claim reads this short list
-- instead of scanning for work across every environment each time.

-- function: slot_holders
-- The runs holding (or owed) a slot in an environment: EXECUTING ones, and WAITING ones whose
-- waitpoints completed, so that they resume ahead of fresh work. Plain index scans: they mark
-- the entries of runs that ended dead as they pass them, so the next count skips them, where a
-- bitmap scan marks none and fetched every run the environment ended since the last vacuum,
-- at every count (bench/sittings/11-one-index-of-held-runs.md).
-- Each holder comes with its concurrency key (sql/claim/keys.sql), NULL for a keyless run.
CREATE OR REPLACE FUNCTION {schema}.slot_holders(env_name text)
RETURNS TABLE (queue text, concurrency_key text)
LANGUAGE plpgsql
STABLE
SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN QUERY
    SELECT r.queue, r.concurrency_key FROM {schema}.runs r
    WHERE r.environment = env_name AND r.status = 'EXECUTING'
    UNION ALL
    SELECT r.queue, r.concurrency_key FROM {schema}.runs r
    WHERE r.environment = env_name AND r.status = 'WAITING' AND r.resume_ready;
END;
$$;

-- function: pick_from_environment
-- Pick up to `take` runs of one environment whose row lock the caller holds (none if it is
-- paused; `env_limit`, `env_burst` and `env_paused` are the row as the lock returned it, its
-- latest version), within the queue caps and the environment cap: across its unpaused queues, in
-- queue_order (when the run was queued, minus its priority in seconds), then id. Each queue is
-- read in the order of the queued index, so no backlog is sorted: only the few rows each queue
-- contributes are merged. The picked runs are locked (FOR UPDATE SKIP LOCKED) and still QUEUED:
-- claim_runs starts every run it picked across environments in one UPDATE at the end, so a
-- claim that serves eight environments opens the runs table for writing once, not eight times.
-- Each environment is picked from at most once per claim, so its counts never miss a run the
-- same claim picked and has not started yet.
-- A queue with queued runs that have a concurrency key is picked from by pick_from_keys
-- (sql/claim/keys.sql): its limit applies per key, its total_limit across them, its keys
-- served round robin; the counts are the same slot holders, grouped by key too.
-- Batch carriers (queue __batches__) hold no slot of the environment's cap and are not bounded
-- by it: they only turn items into runs, and their queue has its own cap (the batch
-- concurrency), so a full environment still processes its batches and they never take its
-- runs' slots.
CREATE OR REPLACE FUNCTION {schema}.pick_from_environment(
    env_name text, env_limit integer, env_burst numeric, env_paused boolean, take integer,
    only_queues text[], only_tasks text[], floor_environments text[], floor_queues text[],
    floor_orders timestamptz[], floor_ids bigint[])
RETURNS TABLE (id bigint, queue_order timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    env_room integer;
    capped boolean;
    held_queues text[];
    held_keys text[];
    held_counts integer[];
BEGIN
    IF env_paused THEN
        RETURN;
    END IF;
    -- Without any cap in the environment no slot needs counting (the common, fast case).
    capped := env_limit IS NOT NULL OR EXISTS (
        SELECT 1 FROM {schema}.queues q
        WHERE q.environment = env_name
          AND (q.concurrency_limit IS NOT NULL OR q.total_limit IS NOT NULL));
    env_room := take;
    IF capped THEN
        -- One pass over the slot holders gives the per-key, per-queue and environment counts.
        SELECT array_agg(per_key.queue), array_agg(per_key.concurrency_key),
               array_agg(per_key.n)
        INTO held_queues, held_keys, held_counts
        FROM (SELECT holder.queue, holder.concurrency_key, count(*)::integer AS n
              FROM {schema}.slot_holders(env_name) AS holder
              GROUP BY holder.queue, holder.concurrency_key) AS per_key;
        IF env_limit IS NOT NULL THEN
            -- In numeric until the least: a cap times its burst factor may pass integer.
            env_room := least(take, floor(env_limit * env_burst)
                                    - coalesce((SELECT sum(held.n)
                                                FROM unnest(held_queues, held_counts)
                                                     AS held(queue, n)
                                                WHERE held.queue <> '__batches__'), 0))::integer;
        END IF;
    END IF;
    IF env_room <= 0 THEN
        IF NOT EXISTS (SELECT 1 FROM {schema}.queues q
                       WHERE q.environment = env_name AND q.name = '__batches__') THEN
            RETURN;
        END IF;
        env_room := 0;  -- carriers only
    END IF;
    RETURN QUERY
    WITH running AS (
        -- Per queue: its slot holders, its keyless ones, and its keys that hold slots.
        SELECT held.queue, sum(held.n)::integer AS n,
               coalesce(sum(held.n) FILTER (WHERE held.concurrency_key IS NULL), 0)::integer
                   AS keyless,
               array_agg(held.concurrency_key) FILTER (WHERE held.concurrency_key IS NOT NULL)
                   AS keys,
               array_agg(held.n) FILTER (WHERE held.concurrency_key IS NOT NULL) AS key_counts
        FROM unnest(held_queues, held_keys, held_counts) AS held(queue, concurrency_key, n)
        GROUP BY held.queue
    ), queue_room AS (
        SELECT q.name, q.name = '__batches__' AS carriers, q.concurrency_limit,
               -- Keyed: it has queued runs with a concurrency key (sql/claim/keys.sql). One
               -- descent of runs_queued_key_idx, which keyless runs never enter. A scalar
               -- subquery in the index's order: an EXISTS was planned as a hashed subplan,
               -- which read every keyed entry of the environment on every claim.
               q.name <> '__batches__' AND (
                   SELECT k.concurrency_key FROM {schema}.runs k
                   WHERE k.environment = env_name AND k.queue = q.name
                     AND k.status = 'QUEUED' AND k.concurrency_key IS NOT NULL
                   ORDER BY k.concurrency_key LIMIT 1) IS NOT NULL AS keyed,
               running.keys, running.key_counts, coalesce(running.keyless, 0) AS keyless,
               CASE WHEN q.name = '__batches__'
                    THEN coalesce(q.concurrency_limit, 2147483647) - coalesce(running.n, 0)
                    -- The queue's cap across keys, and its keyless runs' share of the limit
                    -- (all its runs while it has no keys).
                    ELSE least(least(coalesce(q.total_limit, 2147483647),
                                     coalesce(env_limit, 2147483647)) - coalesce(running.n, 0),
                               coalesce(q.concurrency_limit, 2147483647)
                                   - coalesce(running.keyless, 0))
               END AS room,
               -- A keyed queue's room across its keys, which pick_from_keys bounds one by one.
               least(coalesce(q.total_limit, 2147483647), coalesce(env_limit, 2147483647))
                   - coalesce(running.n, 0) AS keyed_room,
               -- No floor: from the head (every queue_order is later than -infinity).
               coalesce(floor.queue_order, '-infinity') AS floor_order,
               coalesce(floor.id, 0) AS floor_id
        FROM {schema}.queues q
        LEFT JOIN running ON running.queue = q.name
        LEFT JOIN unnest(floor_environments, floor_queues, floor_orders, floor_ids)
            AS floor(environment, queue, queue_order, id)
            ON floor.environment = env_name AND floor.queue = q.name
        WHERE q.environment = env_name
          AND NOT q.paused
          AND (only_queues IS NULL OR q.name = ANY(only_queues))
    ), candidates AS (
        SELECT candidate.id, candidate.queue_order, queue_room.carriers,
               row_number() OVER (PARTITION BY queue_room.carriers
                                  ORDER BY candidate.queue_order, candidate.id) AS nth
        FROM queue_room
        CROSS JOIN LATERAL (
            SELECT plain.id, plain.queue_order FROM (
                SELECT r.id, r.queue_order
                FROM {schema}.runs r
                WHERE NOT queue_room.keyed
                  AND r.environment = env_name AND r.queue = queue_room.name
                  AND r.status = 'QUEUED'
                  AND (r.queue_order, r.id) > (queue_room.floor_order, queue_room.floor_id)
                  -- A TTL limits the wait before a run first starts: one that lapsed is left
                  -- to expire_ttl_runs (exactly its condition, negated), never started. A
                  -- filter on the rows the index walk reads.
                  AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
                  -- The claimer's tasks: a filter on the rows the walk reads, like the TTL
                  -- (the head of this file says what a run of another task ahead costs).
                  AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
                ORDER BY r.queue_order, r.id
                LIMIT least(queue_room.room,
                            CASE WHEN queue_room.carriers THEN take ELSE env_room END)
                FOR UPDATE SKIP LOCKED) AS plain
            UNION ALL
            -- A keyed queue: round robin over its keys, each within the queue's limit.
            SELECT keyed.id, keyed.queue_order
            FROM {schema}.pick_from_keys(
                env_name, queue_room.name, queue_room.concurrency_limit,
                least(queue_room.keyed_room, env_room), queue_room.keys,
                queue_room.key_counts, queue_room.keyless, only_tasks) AS keyed
            WHERE queue_room.keyed
        ) AS candidate
        WHERE CASE WHEN queue_room.keyed THEN queue_room.keyed_room ELSE queue_room.room END > 0
    )
    SELECT c.id, c.queue_order
    FROM candidates c
    WHERE c.carriers OR c.nth <= env_room
    ORDER BY c.queue_order, c.id
    LIMIT take;
END;
$$;

-- function: claim_runs
-- The claim: up to `claim_limit` runs across environments, fairly, within every cap.
-- It serves the environments the scheduler knows to have work (environments.drained is false);
-- `full_scan` also looks for environments that gained work since (claim_candidates).
-- Without it, a claim the known environments cannot fill looks anyway, so work is only left
-- unseen while others keep every claim full, and the worker asks for a full scan whenever a
-- notification says new work arrived.
-- Every statement of the claim walks an index (tests/sql/test_claim_plan.py): with sequential
-- scans off, the planner keeps to them when it prices a scan of a table it believes small (one
-- it planned for while the table was nearly empty) or a few thousand runs of a mid-sized one
-- against as many index probes (which it prices as reads from disk, and which are not).
-- Its statements, and those of the functions it calls, run on generic plans from the first
-- claim. Every other one had settled on its generic plan; left to choose, PostgreSQL kept
-- planning the UPDATE that starts the picked runs anew for each claim (a custom plan knows the
-- picked ids): planning paid by every claim, and felt most by a claim of one run, the pickup
-- (bench/sittings/12-requests-without-their-defaults-statements-planned-once.md). Its generic
-- plan hashes the picked ids and finds the runs by primary key
-- (tests/sql/test_plans_after_growth.py holds that after growth).
CREATE OR REPLACE FUNCTION {schema}.claim_runs(
    claim_limit integer, lease_s double precision, claimer text,
    only_environments text[] DEFAULT NULL, only_queues text[] DEFAULT NULL,
    full_scan boolean DEFAULT true, floor_environments text[] DEFAULT NULL,
    floor_queues text[] DEFAULT NULL, floor_orders timestamptz[] DEFAULT NULL,
    floor_ids bigint[] DEFAULT NULL, only_tasks text[] DEFAULT NULL)
RETURNS TABLE (id bigint, lease_token uuid, task text, payload jsonb, attempts integer,
               max_attempts integer, environment text, queue text, metadata jsonb,
               machine text, max_duration_s double precision, queue_order timestamptz,
               wait_attempt integer, replay boolean)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    settings record;
    env record;
    remaining integer := claim_limit;
    granted integer;
    names text[];
    effective_served bigint[];
    joiners text[];
    visited text[] := '{{}}';
    charged text[] := '{{}}';
    skipped integer[];
    picked bigint[] := '{{}}';
    env_picked bigint[];
    take integer;
    claimed integer;
    total integer := 0;
    locked_any boolean;
    waiting boolean;
    pass integer;
    i integer;
BEGIN
    SELECT s.quantum, s.max_deficit, s.global_concurrency_limit, s.rate_limit_per_s
    INTO settings FROM {schema}.scheduler s WHERE s.id = 1;
    IF settings.rate_limit_per_s IS NOT NULL THEN
        remaining := {schema}.take_rate_tokens(remaining, clock_timestamp());
    END IF;
    granted := remaining;
    IF settings.global_concurrency_limit IS NOT NULL AND remaining > 0 THEN
        -- The global cap serialises every claimer on the scheduler row; it is off by default.
        PERFORM 1 FROM {schema}.scheduler s WHERE s.id = 1 FOR UPDATE;
        SELECT least(remaining, settings.global_concurrency_limit - count(*))
        INTO remaining FROM {schema}.runs r WHERE r.status = 'EXECUTING';
    END IF;

    -- Pass 1 serves the known environments (and, with full_scan, the ones a scan finds); pass
    -- 2, only when they left the claim short and no scan was made, the ones a scan finds now.
    FOR pass IN 1 .. 2 LOOP
        EXIT WHEN remaining <= 0 OR (pass = 2 AND full_scan);
        SELECT array_agg(c.name ORDER BY c.turn), array_agg(c.effective_served ORDER BY c.turn),
               coalesce(joiners, '{{}}')
                   || coalesce(array_agg(c.name) FILTER (WHERE c.joining), '{{}}')
        INTO names, effective_served, joiners
        FROM {schema}.claim_candidates(settings.max_deficit, only_environments,
                                       full_scan OR pass = 2) AS c
        WHERE c.name <> ALL (visited);
        CONTINUE WHEN names IS NULL;
        locked_any := false;
        waiting := false;
        skipped := '{{}}';
        i := 0;
        LOOP
            EXIT WHEN remaining <= 0;
            i := i + 1;
            IF i > cardinality(names) THEN
                -- Every candidate was locked by other claimers (one busy tenant, many workers):
                -- wait for the first instead of coming back empty. Each holder keeps the lock
                -- for one claim only, and a claimer that waits holds no other environment lock,
                -- so waiting cannot deadlock.
                EXIT WHEN locked_any OR waiting OR cardinality(skipped) = 0;
                waiting := true;
                i := skipped[1];
                SELECT e.concurrency_limit, e.burst_factor, e.paused INTO env
                FROM {schema}.environments e WHERE e.name = names[i] FOR UPDATE;
            ELSE
                visited := visited || names[i];
                -- A locking read returns the row's latest version, so a pause or a limit that
                -- committed after this statement began (or while it waited) is seen.
                SELECT e.concurrency_limit, e.burst_factor, e.paused INTO env
                FROM {schema}.environments e
                WHERE e.name = names[i] FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    skipped := skipped || i;
                    CONTINUE;
                END IF;
                locked_any := true;
            END IF;
            -- A quantum per turn while others wait; a lone environment may take the whole claim.
            take := CASE WHEN waiting THEN remaining
                         ELSE least(remaining, greatest(settings.quantum, ceil(
                             remaining::numeric / (cardinality(names) - i + 1))))::integer
                    END;
            SELECT coalesce(array_agg(p.id ORDER BY p.queue_order, p.id), '{{}}')
            INTO env_picked
            FROM {schema}.pick_from_environment(
                names[i], env.concurrency_limit, env.burst_factor, env.paused, take,
                only_queues, only_tasks, floor_environments, floor_queues, floor_orders,
                floor_ids) AS p;
            claimed := cardinality(env_picked);
            picked := picked || env_picked;
            -- Charge the service it got; it is drained when it has no queued run left but the
            -- ones just picked (still QUEUED until the UPDATE below). A claim that got every run
            -- it asked for leaves it active without looking: the look walks the queued index
            -- from the environment's first entry, through every entry of a run claimed since
            -- the last vacuum. At worst an environment that just emptied stays active until the
            -- next claim finds nothing there. A scalar subquery keeps its ORDER BY (EXISTS
            -- would drop it), and that order matches the queued index, so even a generic plan
            -- walks the index.
            -- The look counts the runs of every task, not only the claimer's: an environment
            -- whose runs this claimer does not serve stays active for the workers that do, and
            -- is charged nothing. One that was drained and is found with runs (a joiner) is
            -- levelled as mark_environments_active would level it, so that a visit that took
            -- nothing (tasks, caps) leaves it no credit for its idle time.
            UPDATE {schema}.environments e
            SET served = CASE WHEN claimed > 0 THEN greatest(e.served, effective_served[i]) + claimed
                              WHEN e.drained THEN greatest(e.served, effective_served[i])
                              ELSE e.served END,
                last_served_at = CASE WHEN claimed > 0 THEN clock_timestamp()
                                      ELSE e.last_served_at END,
                drained = CASE WHEN claimed >= take THEN false ELSE (
                    SELECT r.id FROM {schema}.runs r
                    WHERE r.environment = names[i] AND r.status = 'QUEUED'
                      AND r.id <> ALL (env_picked)
                    ORDER BY r.environment, r.queue, r.queue_order, r.id
                    LIMIT 1) IS NULL END
            WHERE e.name = names[i];
            charged := charged || names[i];
            remaining := remaining - claimed;
            total := total + claimed;
            EXIT WHEN waiting;
        END LOOP;
    END LOOP;

    -- Start what was picked, in the order it was picked; the attempt is counted here, but not
    -- for a run that waited without a worker and is resumed (resume_ready: mark_runs_ready).
    -- replay says whether the run has recorded calls (sql/waitpoints/steps.sql) to replay. The
    -- runs are found through an index condition on the primary key: joined on id alone, the
    -- plan a session keeps from claims made while the table held a few runs hashed the picked
    -- ids and scanned the whole table on every later claim.
    IF cardinality(picked) > 0 THEN
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
                      r.queue_order, r.wait_attempt, p.nth
        )
        SELECT s.id, s.lease_token, s.task, s.payload, s.attempts, s.max_attempts,
               s.environment, s.queue, s.metadata, s.machine, s.max_duration_s, s.queue_order,
               s.wait_attempt,
               EXISTS (SELECT 1 FROM {schema}.run_steps AS step WHERE step.run_id = s.id)
        FROM started s
        ORDER BY s.nth;
    END IF;

    -- Environments the scan found and this claim did not serve join the active ones now, level
    -- with the least-served (the ones it served were charged: that marked them).
    IF NOT joiners <@ charged THEN
        PERFORM {schema}.mark_environments_active(joiners, charged);
    END IF;

    IF settings.rate_limit_per_s IS NOT NULL THEN
        PERFORM {schema}.return_rate_tokens(granted - total);
    END IF;
END;
$$;

-- function: mark_environments_active
-- Environments a scan found with queued runs join the active ones, level with the
-- least-served active environment: no credit for the time they had nothing to run. Rows other
-- claimers hold are skipped: those claimers charge them, and a later scan finds the rest.
CREATE OR REPLACE FUNCTION {schema}.mark_environments_active(found_names text[], charged_names text[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    WITH joining AS (
        SELECT j.name FROM {schema}.environments j
        WHERE j.name = ANY(found_names) AND j.name <> ALL(charged_names) AND j.drained
        FOR UPDATE SKIP LOCKED
    )
    UPDATE {schema}.environments AS e
    SET drained = false,
        served = greatest(e.served, coalesce(
            (SELECT min(peer.served) FROM {schema}.environments peer
             WHERE NOT peer.drained AND NOT peer.paused), e.served))
    FROM joining
    WHERE e.name = joining.name;
END;
$$;

-- function: claim_candidates
-- Environments to serve and their turn: least served first, and among equals the one served
-- longest ago, so environments joining level with the others go first. An environment's
-- credit is capped: it counts as served at least `max_deficit` less than the most-served
-- active one. The known ones (drained false) are read through a partial index on environments.
--
-- With `full_scan`, environments that gained work are found too (`joining`), by a loose index
-- scan of the queued index: one descent per environment with queued runs, never a scan of the
-- runs. They rank level with the least-served known environment; nothing is written here (the
-- claim charges the ones it serves and marks the rest: mark_environments_active).
--
-- A plain STABLE sql function, so the planner inlines it into the claim's statement, whose plan
-- is cached.
CREATE OR REPLACE FUNCTION {schema}.claim_candidates(
    max_deficit integer, only_environments text[], full_scan boolean)
RETURNS TABLE (name text, effective_served bigint, turn bigint, joining boolean)
LANGUAGE sql
STABLE
AS $$
    WITH RECURSIVE active(environment) AS (
        (SELECT r.environment FROM {schema}.runs r
         WHERE full_scan AND r.status = 'QUEUED'
         ORDER BY r.environment LIMIT 1)
        UNION ALL
        SELECT (SELECT r.environment FROM {schema}.runs r
                WHERE r.status = 'QUEUED' AND r.environment > active.environment
                ORDER BY r.environment LIMIT 1)
        FROM active
        WHERE active.environment IS NOT NULL
    ), known AS (
        SELECT e.name, e.served, e.last_served_at, false AS joining
        FROM {schema}.environments e
        WHERE NOT e.drained
          AND NOT e.paused
          AND (only_environments IS NULL OR e.name = ANY(only_environments))
    ), candidates AS (
        SELECT * FROM known
        UNION ALL
        SELECT e.name,
               greatest(e.served, coalesce((SELECT min(k.served) FROM known k), e.served)),
               e.last_served_at, true
        FROM {schema}.environments e
        JOIN active ON active.environment = e.name
        WHERE e.drained
          AND NOT e.paused
          AND (only_environments IS NULL OR e.name = ANY(only_environments))
    )
    SELECT ranked.name, ranked.effective_served,
           row_number() OVER (ORDER BY ranked.effective_served, ranked.last_served_at NULLS FIRST,
                                       ranked.name),
           ranked.joining
    FROM (SELECT c.name, c.last_served_at, c.joining,
                 greatest(c.served, (SELECT max(served) FROM candidates) - max_deficit)
                     AS effective_served
          FROM candidates c) AS ranked;
$$;

-- name: claim_runs
-- params: limit integer, lease_s double precision, worker_id text, environments text[],
-- params: queues text[], full_scan boolean, floor_environments text[], floor_queues text[],
-- params: floor_orders timestamp with time zone[], floor_ids bigint[], tasks text[]
-- Claim up to %(limit)s runs in one statement: fairly across environments, within every cap,
-- each with a fresh lease token that all later writes must present (sql/leases/outcomes.sql). The
-- attempt is counted here, so a redelivery after a lapsed lease counts as one too; its
-- wait_attempt (the attempt whose waits it keeps) moves only when a failure is retried.
-- %(full_scan)s: look for environments that gained work before serving the known ones.
-- The floors (four arrays, one element per queue, or NULL): where each queue's walk starts.
-- %(tasks)s: the tasks the claimer has handlers for (NULL: any); runs of other tasks wait.
-- No payload (JSON null) and no metadata ({}) come back as SQL NULL, which the client reads
-- without calling its JSON decoder (two calls per claimed run, most of them for these).
SELECT id, lease_token, task, nullif(payload, 'null') AS payload, attempts, max_attempts,
       environment, queue, nullif(metadata, '{{}}') AS metadata, machine, max_duration_s,
       queue_order, wait_attempt, replay
FROM {schema}.claim_runs(%(limit)s, %(lease_s)s, %(worker_id)s,
                         %(environments)s::text[], %(queues)s::text[], %(full_scan)s,
                         %(floor_environments)s::text[], %(floor_queues)s::text[],
                         %(floor_orders)s::timestamptz[], %(floor_ids)s::bigint[],
                         %(tasks)s::text[]);
