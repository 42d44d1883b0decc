-- The claim and its candidate scan as they stood from revision 0002 to 0006: 0002 installs
-- them from here and 0007's downgrade restores them (sql/scheduling.sql has the current forms).
-- Frozen: never edit these to follow later changes.

-- name: claim_runs_0006
-- The claim: up to `claim_limit` runs across environments, fairly, within every cap.
CREATE OR REPLACE FUNCTION {schema}.claim_runs(
    claim_limit integer, lease_s double precision, claimer text,
    only_environments text[] DEFAULT NULL, only_queues text[] DEFAULT NULL)
RETURNS TABLE (id bigint, lease_token uuid, task text, payload jsonb, attempts integer,
               max_attempts integer, environment text, queue text, metadata jsonb,
               machine text, max_duration_s double precision)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    settings record;
    remaining integer := claim_limit;
    granted integer;
    names text[];
    served bigint[];
    skipped integer[] := '{{}}';
    take integer;
    claimed integer;
    total integer := 0;
    locked_any boolean := false;
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
    IF remaining <= 0 THEN
        IF settings.rate_limit_per_s IS NOT NULL THEN
            PERFORM {schema}.return_rate_tokens(granted);
        END IF;
        RETURN;
    END IF;

    SELECT array_agg(c.name ORDER BY c.turn), array_agg(c.effective_served ORDER BY c.turn)
    INTO names, served
    FROM {schema}.claim_candidates(settings.max_deficit, only_environments) c;

    FOR i IN 1 .. coalesce(cardinality(names), 0) LOOP
        EXIT WHEN remaining <= 0;
        PERFORM 1 FROM {schema}.environments e WHERE e.name = names[i] FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            skipped := skipped || i;
            CONTINUE;
        END IF;
        locked_any := true;
        -- A quantum per turn while others wait; a lone environment may take the whole claim.
        take := least(remaining, greatest(settings.quantum,
                                          ceil(remaining::numeric / (cardinality(names) - i + 1))));
        RETURN QUERY SELECT * FROM {schema}.claim_from_environment(
            names[i], take, lease_s, claimer, only_queues);
        GET DIAGNOSTICS claimed = ROW_COUNT;
        PERFORM {schema}.charge_environment(names[i], served[i], claimed);
        remaining := remaining - claimed;
        total := total + claimed;
    END LOOP;

    -- Every candidate was locked by other claimers (one busy tenant, many workers): wait for the
    -- first instead of coming back empty. Each holder keeps the lock for one claim only, and a
    -- claimer that waits holds no other environment lock, so waiting cannot deadlock.
    IF NOT locked_any AND remaining > 0 AND cardinality(skipped) > 0 THEN
        i := skipped[1];
        PERFORM 1 FROM {schema}.environments e WHERE e.name = names[i] FOR UPDATE;
        RETURN QUERY SELECT * FROM {schema}.claim_from_environment(
            names[i], remaining, lease_s, claimer, only_queues);
        GET DIAGNOSTICS claimed = ROW_COUNT;
        PERFORM {schema}.charge_environment(names[i], served[i], claimed);
        total := total + claimed;
    END IF;

    IF settings.rate_limit_per_s IS NOT NULL THEN
        PERFORM {schema}.return_rate_tokens(granted - total);
    END IF;
END;
$$;

-- name: claim_candidates_0006
-- Environments with claimable runs and their turn: least served first, and among equals the
-- one served longest ago, so environments joining level with the others go first. The recursive CTE is a loose index
-- scan of the queued index: one descent per environment, never a scan of the queued runs.
CREATE OR REPLACE FUNCTION {schema}.claim_candidates(max_deficit integer, only_environments text[])
RETURNS TABLE (name text, effective_served bigint, turn bigint)
LANGUAGE sql
STABLE
AS $$
WITH RECURSIVE active(environment) AS (
    (SELECT r.environment FROM {schema}.runs r
     WHERE r.status = 'QUEUED'
     ORDER BY r.environment LIMIT 1)
    UNION ALL
    SELECT (SELECT r.environment FROM {schema}.runs r
            WHERE r.status = 'QUEUED' AND r.environment > active.environment
            ORDER BY r.environment LIMIT 1)
    FROM active
    WHERE active.environment IS NOT NULL
), candidates AS (
    SELECT e.name, e.served, e.drained, e.last_served_at
    FROM {schema}.environments e
    JOIN active ON active.environment = e.name
    WHERE NOT e.paused
      AND (only_environments IS NULL OR e.name = ANY(only_environments))
), bounds AS (
    SELECT max(served) FILTER (WHERE NOT drained) AS most,
           min(served) FILTER (WHERE NOT drained) AS least_served
    FROM candidates
)
SELECT ranked.name, ranked.effective_served,
       row_number() OVER (ORDER BY ranked.effective_served, ranked.last_served_at NULLS FIRST,
                                   ranked.name)
FROM (
    SELECT c.name, c.last_served_at,
           CASE WHEN c.drained THEN greatest(c.served, coalesce(b.least_served, c.served))
                ELSE greatest(c.served, coalesce(b.most, c.served) - max_deficit)
           END AS effective_served
    FROM candidates c CROSS JOIN bounds b
) AS ranked;
$$;
