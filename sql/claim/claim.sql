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
-- The active environments are the ones with environments.drained false: an environment found
-- with work becomes active (sql/claim/turns.sql), and the claim that leaves it empty marks it
-- drained. A claim reads them in turn order a page at a time (claim_turns) instead of ranking
-- every one of them, so its cost follows what it serves, not how many tenants have work.

-- function: claim_runs
-- The claim: up to `claim_limit` runs across environments, fairly, within every cap.
-- It serves the active environments (environments.drained false) in turn order, reading them
-- from environments_turn_idx a page at a time (claim_turns, sql/claim/turns.sql), so a claim
-- reads the environments it serves and the next few, however many tenants have work.
-- `full_scan` first looks for environments that gained work (environments_with_work);
-- `announced_environments` looks only at the ones named (those notifications named: one of
-- them, while no environment is active, is the pickup, claimed in one statement by
-- claim_announced, sql/claim/announced.sql); without
-- either, a claim the active environments cannot fill looks anyway, so work is only left unseen
-- while others keep every claim full.
-- It goes in rounds (claim_round): each locks the next page of environments it can, picks
-- from all of them in one statement, at most a turn's share each, and keeps the picks in turn
-- order up to what the claim still wants. A page holds as many environments as the claim
-- needs at the yield the last round saw, so deep backlogs take one round and thousands of
-- environments with a run or two take a few. When the turn order is exhausted and the claim is
-- still short, the environments that gave their whole share are asked again (a lap) for what
-- is left, after the runs picked so far started: a slot count made in a lap sees them.
-- Environments are charged once, at the end: their turn order does not move while the claim
-- reads it, so no page returns an environment the claim has visited.
-- Every charge moves an environment forward in the turn order and leaves a dead entry in the
-- index where it was, in front of the live ones, until the table is vacuumed: under a steady
-- load a read from the index's start walked every charge since the last vacuum. So a claim
-- returns `first_turn`, where it found the first active environment, and the caller's next
-- claim starts there (`turn_start`). No active environment sorts before it then: a charge
-- only moves one forward; one that joins in this claim without being served (levelled with
-- the least served, and served longest ago, it may sort first) is counted in `first_turn`;
-- and a claim starts no later than any active environment it is announced (one unpaused:
-- a change of limits announces it; one another claim let join: its trigger announced it).
-- One case is left: an environment another claim let join, levelled with a least service a
-- concurrent charge had just raised, whose announcement this caller's claims no longer
-- carry. That claim's caller reads it (its `first_turn` counts it); this caller sends no
-- start in a full scan (which also ignores one) and after a claim that came back short, so it
-- reads it in its next full scan at worst (a worker's poll interval). A claim of some
-- environments only (`only_environments`) neither uses nor returns a start.
-- Every statement of the claim walks an index (tests/sql/test_claim_plan.py), on generic plans
-- from the first claim
-- (bench/sittings/12-requests-without-their-defaults-statements-planned-once.md).
CREATE OR REPLACE FUNCTION {schema}.claim_runs(
    claim_limit integer, lease_s double precision, claimer text,
    only_environments text[] DEFAULT NULL, only_queues text[] DEFAULT NULL,
    full_scan boolean DEFAULT true, floor_environments text[] DEFAULT NULL,
    floor_queues text[] DEFAULT NULL, floor_orders timestamptz[] DEFAULT NULL,
    floor_ids bigint[] DEFAULT NULL, only_tasks text[] DEFAULT NULL,
    announced_environments text[] DEFAULT NULL, last_yield double precision DEFAULT NULL,
    turn_start text DEFAULT NULL)
RETURNS TABLE (id bigint, lease_token uuid, task text, payload jsonb, attempts integer,
               max_attempts integer, environment text, queue text, metadata jsonb,
               machine text, max_duration_s double precision, queue_order timestamptz,
               wait_attempt integer, replay boolean, first_turn text)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    settings record;
    remaining integer := claim_limit;
    granted integer;
    total integer := 0;
    -- Where the next page of the turn order starts.
    after_served bigint := -9223372036854775808;
    after_turn timestamptz := '-infinity';
    after_name text := '';
    -- Whether the first page starts at (not after) that position: a caller's turn_start.
    include_after boolean := false;
    -- Where this claim started reading the turn order: no active environment sorts before it.
    start_served bigint := -9223372036854775808;
    start_turn timestamptz := '-infinity';
    start_name text := '';
    -- Where the caller's next claim may start (first_turn): the first environment of the turn
    -- order this claim read, or its start when it read none.
    turns_read boolean := false;
    first_served bigint;
    first_at timestamptz;
    first_name text;
    -- The environments this claim let join: a scan's finds that it served (marked), and the
    -- announced ones of its first round (joined), levelled to joining_served at the charge.
    marked text[] := '{{}}';
    joining_served bigint;
    page_names text[];
    page_served bigint[];
    page_turns timestamptz[];
    -- A claim that scanned, or looked where notifications said work arrived, looks no more.
    looked boolean := full_scan OR announced_environments IS NOT NULL;
    lapping boolean := false;
    -- A page that came back short: the turn order has nothing after it.
    exhausted boolean := false;
    how_many integer;
    yield numeric;
    -- The announced environments the first round takes (claim_round's `joining`), and those
    -- it locked: they join as they are charged.
    joining text[];
    joining_round boolean;
    joined text[] := '{{}}';
    round record;
    -- The environments that gave their whole share, asked again in the next lap.
    again_names text[] := '{{}}';
    skipped text[] := '{{}}';
    found text[] := '{{}}';
    -- Every visit: environment, effective service, share asked, runs given; charged at the end.
    visited_names text[] := '{{}}';
    visited_shares integer[] := '{{}}';
    visited_taken integer[] := '{{}}';
    picked bigint[] := '{{}}';
    announced_taken bigint;
BEGIN
    SELECT s.quantum, s.max_deficit, s.global_concurrency_limit, s.rate_limit_per_s
    INTO settings FROM {schema}.scheduler s WHERE s.id = 1;
    -- A pickup on an otherwise idle system, in one statement (sql/claim/announced.sql); when
    -- its case does not hold it takes nothing, and the claim goes on as below.
    IF NOT full_scan AND cardinality(announced_environments) = 1 AND claim_limit > 0
       AND settings.rate_limit_per_s IS NULL AND settings.global_concurrency_limit IS NULL THEN
        RETURN QUERY
        SELECT a.*, NULL::text FROM {schema}.claim_announced(
            announced_environments[1], claim_limit, lease_s, claimer, only_environments,
            only_queues, only_tasks, floor_environments, floor_queues, floor_orders, floor_ids)
            AS a;
        -- (FOUND is this function's variable `found`; the row count says it.)
        GET DIAGNOSTICS announced_taken = ROW_COUNT;
        IF announced_taken > 0 THEN
            RETURN;
        END IF;
    END IF;
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

    -- Environments that gained work join the turn order first, level with the least served.
    IF remaining > 0 AND full_scan THEN
        found := ARRAY(SELECT w.environment FROM {schema}.environments_with_work() AS w
                       WHERE only_environments IS NULL OR w.environment = ANY(only_environments));
        PERFORM {schema}.mark_environments_active(found);
    END IF;
    -- The turn order is read from where the caller's last claim found its first environment:
    -- every active environment sorts there or after, but for the case the function's comment
    -- names. Not in a full scan, which reads it from its start, nor for a claim of some
    -- environments only, whose start says nothing of the others.
    IF turn_start IS NOT NULL AND NOT full_scan AND only_environments IS NULL THEN
        after_served := (turn_start::jsonb ->> 0)::bigint;
        after_turn := (turn_start::jsonb ->> 1)::timestamptz;
        after_name := turn_start::jsonb ->> 2;
        include_after := true;
        -- An announced environment that is active may sort before the start (one unpaused,
        -- one another claim let join): the claim starts no later than the first of them.
        IF announced_environments IS NOT NULL THEN
            SELECT p.served, p.turn_at, p.name INTO after_served, after_turn, after_name
            FROM (SELECT after_served AS served, after_turn AS turn_at, after_name AS name
                  UNION ALL
                  SELECT e.served, coalesce(e.last_served_at, '-infinity'::timestamptz), e.name
                  FROM {schema}.environments e
                  WHERE e.name = ANY(announced_environments)
                    AND NOT e.drained AND NOT e.paused) AS p
            ORDER BY p.served, p.turn_at, p.name
            LIMIT 1;
        END IF;
        start_served := after_served;
        start_turn := after_turn;
        start_name := after_name;
        first_served := after_served;
        first_at := after_turn;
        first_name := after_name;
    END IF;
    -- The first page is sized by `last_yield`, the runs per environment the caller's last
    -- claim got (the caller keeps it: a session setting would outlive the transaction behind a
    -- pooler), never above the quantum, so the first round's share stays a turn's: a claim of a
    -- few runs over environments with a run or two each reads enough of them in one round
    -- instead of one environment, then the rest.
    yield := least(settings.quantum, greatest(1, coalesce(last_yield::numeric, settings.quantum)));
    -- Announced environments that were drained join by being served first: one round takes
    -- them, and the charge at the end levels them with the least-served active environment,
    -- the one write mark_environments_active would have made before the claim. Past what a
    -- page would hold, they are marked active and wait their turn.
    IF remaining > 0 AND NOT full_scan AND announced_environments IS NOT NULL THEN
        IF only_environments IS NULL THEN
            joining := announced_environments;
        ELSE
            joining := ARRAY(SELECT a.name FROM unnest(announced_environments) AS a(name)
                             WHERE a.name = ANY(only_environments));
        END IF;
        how_many := least(1000, ceil(remaining / yield))::integer;
        IF cardinality(joining) > how_many THEN
            PERFORM {schema}.mark_environments_active(joining[how_many + 1:]);
            joining := joining[1:how_many];
        END IF;
    END IF;

    LOOP
        EXIT WHEN remaining <= 0;
        page_names := NULL;
        joining_round := coalesce(cardinality(joining), 0) > 0;
        IF joining_round THEN
            page_names := joining;
            joining := NULL;
        ELSIF NOT lapping THEN
            IF NOT exhausted THEN
                how_many := least(1000, ceil(remaining / yield))::integer;
                SELECT array_agg(t.name ORDER BY t.nth), array_agg(t.served ORDER BY t.nth),
                       array_agg(t.turn_at ORDER BY t.nth)
                INTO page_names, page_served, page_turns
                FROM {schema}.claim_turns(only_environments, after_served, after_turn,
                                          after_name, how_many, include_after) AS t;
                exhausted := coalesce(cardinality(page_names), 0) < how_many;
                IF NOT turns_read AND page_names IS NOT NULL THEN
                    first_served := page_served[1];
                    first_at := page_turns[1];
                    first_name := page_names[1];
                END IF;
                turns_read := true;
                include_after := false;
            END IF;
            IF page_names IS NOT NULL THEN
                after_served := page_served[cardinality(page_names)];
                after_turn := page_turns[cardinality(page_names)];
                after_name := page_names[cardinality(page_names)];
            ELSIF NOT looked THEN
                -- The active environments could not fill the claim: look for others, once.
                -- They were drained, so this claim has not visited them.
                looked := true;
                found := ARRAY(SELECT w.environment FROM {schema}.environments_with_work() AS w
                               WHERE only_environments IS NULL
                                  OR w.environment = ANY(only_environments));
                SELECT array_agg(j.name ORDER BY j.served, j.name) INTO page_names
                FROM {schema}.mark_environments_active(found) AS j;
                marked := coalesce(page_names, '{{}}');
            END IF;
        END IF;
        IF page_names IS NULL THEN
            EXIT WHEN cardinality(again_names) = 0;
            -- A lap: the runs picked so far start first, so that the slot counts see them.
            RETURN QUERY SELECT * FROM {schema}.start_picked_runs(picked, lease_s, claimer);
            picked := '{{}}';
            lapping := true;
            page_names := again_names;
            again_names := '{{}}';
        END IF;
        SELECT * INTO round
        FROM {schema}.claim_round(page_names, remaining, settings.quantum, only_queues, only_tasks,
                                  floor_environments, floor_queues, floor_orders, floor_ids,
                                  joining => joining_round);
        skipped := skipped || round.skipped;
        CONTINUE WHEN round.names IS NULL;
        IF joining_round THEN
            joined := round.names;
        END IF;
        picked := picked || round.picked;
        visited_names := visited_names || round.names;
        visited_shares := visited_shares || array_fill(round.share, ARRAY[cardinality(round.names)]);
        visited_taken := visited_taken || round.taken;
        again_names := again_names || round.again;
        remaining := remaining - cardinality(round.picked);
        total := total + cardinality(round.picked);
        yield := greatest(1, cardinality(round.picked)::numeric / cardinality(round.names));
    END LOOP;

    -- Every candidate was locked by other claimers (one busy tenant, many workers): wait for
    -- the first instead of coming back empty. A scan's find that is neither active nor was
    -- marked is one another claim holds (marking skips it) and may be charging. Each holder
    -- keeps the lock for one claim only, and this claimer holds no other environment row, so
    -- waiting cannot deadlock.
    IF total = 0 AND cardinality(visited_names) = 0 AND cardinality(skipped || found) > 0 THEN
        SELECT * INTO round
        FROM {schema}.claim_round((skipped || found)[1:1], remaining, remaining, only_queues, only_tasks, floor_environments,
                                  floor_queues, floor_orders, floor_ids, wait => true);
        IF round.names IS NOT NULL THEN
            picked := round.picked;
            total := cardinality(round.picked);
            visited_names := round.names;
            visited_shares := ARRAY[round.share];
            visited_taken := round.taken;
        END IF;
    END IF;

    -- The service a joiner of the first round is levelled to, read before the runs start so
    -- that first_turn can say where a joiner that took nothing stays (below).
    IF cardinality(joined) > 0 THEN
        SELECT min(a.served) INTO joining_served
        FROM {schema}.environments a
        WHERE NOT a.drained AND NOT a.paused
          AND (a.served, coalesce(a.last_served_at, '-infinity'::timestamptz), a.name)
              >= (start_served, start_turn, start_name);
    END IF;
    -- An environment that joined in this claim and took nothing stays active where it joined,
    -- which may sort before every environment the turn order showed (level with the least
    -- served, and served longest ago): the caller's next claim starts no later than there.
    IF first_name IS NOT NULL AND only_environments IS NULL
       AND cardinality(joined || marked) > 0 THEN
        SELECT p.served, p.turn_at, p.name INTO first_served, first_at, first_name
        FROM (SELECT first_served AS served, first_at AS turn_at, first_name AS name
              UNION ALL
              SELECT CASE WHEN e.name = ANY(joined) THEN greatest(e.served, joining_served)
                          ELSE e.served END,
                     coalesce(e.last_served_at, '-infinity'::timestamptz), e.name
              FROM {schema}.environments e
              WHERE e.name = ANY(joined || marked)
                AND NOT e.name = ANY(ARRAY(SELECT x.name
                                           FROM unnest(visited_names, visited_taken)
                                                AS x(name, taken)
                                           WHERE x.taken > 0))) AS p
        ORDER BY p.served, p.turn_at, p.name
        LIMIT 1;
    END IF;
    IF cardinality(picked) > 0 THEN
        RETURN QUERY SELECT * FROM {schema}.start_picked_runs(
            picked, lease_s, claimer,
            CASE WHEN only_environments IS NULL AND first_name IS NOT NULL
                 THEN jsonb_build_array(first_served, first_at, first_name)::text END);
    END IF;

    -- Charge each environment visited the service it got, and mark it drained when it has no
    -- QUEUED run left (the runs just started are EXECUTING by now). One that gave its whole
    -- share at every visit stays active without looking: the look (queued_run_of,
    -- sql/runs/queued.sql) walks the queued indexes from the environment's first entry,
    -- through every entry of a run claimed since the last vacuum. At worst an environment that
    -- just emptied stays active until a claim finds nothing there. The look counts the runs of
    -- every task, not only the claimer's: an environment whose runs this claimer does not serve
    -- stays active for the workers that do, and is charged nothing.
    IF cardinality(visited_names) > 0 THEN
        -- An environment's credit is capped: it counts as served at least max_deficit less
        -- than the most-served active one (one descent of the turn index, from its end). One
        -- that joined in this claim counts as served at least as much as the least-served
        -- active one, as mark_environments_active levels it (joining_served, above: a descent
        -- of the index from where this claim started reading it, made only when one joined;
        -- the index's start is where the entries of the environments charged since the last
        -- vacuum lie dead).
        WITH cap AS (
            SELECT max(a.served) - settings.max_deficit AS least_served
            FROM {schema}.environments a WHERE NOT a.drained AND NOT a.paused
        )
        UPDATE {schema}.environments AS e
        SET served = CASE WHEN v.taken > 0
                          THEN greatest(e.served, (SELECT cap.least_served FROM cap),
                                        CASE WHEN v.joined THEN joining_served END)
                               + v.taken
                          WHEN v.joined
                          THEN greatest(e.served, joining_served)
                          ELSE e.served END,
            last_served_at = CASE WHEN v.taken > 0 THEN clock_timestamp()
                                  ELSE e.last_served_at END,
            drained = NOT v.queued
        FROM (SELECT g.name, g.taken, g.joined,
                     g.full OR (SELECT q.id
                                FROM {schema}.queued_run_of(g.name, ARRAY[]::bigint[]) AS q)
                               IS NOT NULL AS queued
              FROM (SELECT x.name, sum(x.taken)::integer AS taken,
                           bool_and(x.taken >= x.share) AS full, x.name = ANY(joined) AS joined
                    FROM unnest(visited_names, visited_shares, visited_taken)
                         AS x(name, share, taken)
                    GROUP BY x.name) AS g) AS v
        WHERE e.name = v.name
          -- One a notification named that has no queued run left (another claim took it) is
          -- left as it was: drained, and not levelled.
          AND (v.taken > 0 OR v.queued OR NOT v.joined);
    END IF;

    IF settings.rate_limit_per_s IS NOT NULL THEN
        PERFORM {schema}.return_rate_tokens(granted - total);
    END IF;
END;
$$;

-- name: claim_runs
-- params: limit integer, lease_s double precision, worker_id text, environments text[],
-- params: queues text[], full_scan boolean, floor_environments text[], floor_queues text[],
-- params: floor_orders timestamp with time zone[], floor_ids bigint[], tasks text[],
-- params: announced text[], last_yield double precision, turn_start text
-- Claim up to %(limit)s runs in one statement: fairly across environments, within every cap,
-- each with a fresh lease token that all later writes must present (sql/leases/outcomes.sql). The
-- attempt is counted here, so a redelivery after a lapsed lease counts as one too; its
-- wait_attempt (the attempt whose waits it keeps) moves only when a failure is retried.
-- %(full_scan)s: look for environments that gained work before serving the known ones;
-- %(announced)s: look only at these (the environments notifications named since the last claim).
-- %(last_yield)s: runs per environment the caller's last claim got (NULL: none yet), which
-- sizes the first page of the turn order this claim reads.
-- %(turn_start)s: the first_turn the caller's last claim returned (NULL: read the turn order
-- from its start); first_turn comes back on the last row alone.
-- The floors (four arrays, one element per queue, or NULL): where each queue's walk starts.
-- %(tasks)s: the tasks the claimer has handlers for (NULL: any); runs of other tasks wait.
-- No payload (JSON null) and no metadata ({}) come back as SQL NULL, which the client reads
-- without calling its JSON decoder (two calls per claimed run, most of them for these).
-- The arrays go in binary: the text form quotes each element by regular expression, and the
-- floors of a worker serving many tenants are up to 64 queues' worth, four arrays.
SELECT id, lease_token, task, nullif(payload, 'null') AS payload, attempts, max_attempts,
       environment, queue, nullif(metadata, '{{}}') AS metadata, machine, max_duration_s,
       queue_order, wait_attempt, replay, first_turn
FROM {schema}.claim_runs(%(limit)s, %(lease_s)s, %(worker_id)s,
                         %(environments)b::text[], %(queues)b::text[], %(full_scan)s,
                         %(floor_environments)b::text[], %(floor_queues)b::text[],
                         %(floor_orders)b::timestamptz[], %(floor_ids)b::bigint[],
                         %(tasks)b::text[], %(announced)b::text[], %(last_yield)s,
                         %(turn_start)s);
