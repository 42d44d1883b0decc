-- The turn order of the fair claim (sql/claim/claim.sql): which environments are active, and
-- in which order a claim serves them.
--
-- An environment is active while environments.drained is false. A claim that leaves one with
-- no queued run marks it drained; a scan of the queued indexes (environments_with_work), or a
-- look at the environments a notification named, finds those that gained work again, and
-- mark_environments_active lets them rejoin. The active, unpaused ones are kept in turn order
-- by environments_turn_idx: least served first, then the one served longest ago (never served:
-- first), then the name. A claim reads that order a page at a time (claim_turns), so what it
-- reads grows with the environments it serves, not with every environment that has work.

-- function: claim_turns
-- The next `how_many` active, unpaused environments in turn order after the position
-- (`after_served`, `after_turn`, `after_name`), or from it when `include_after` (a start a
-- previous claim returned: the environment there may not have moved), each with its position.
-- One range scan of environments_turn_idx. A plain STABLE sql function, so the planner inlines
-- it into the claim's statement.
CREATE OR REPLACE FUNCTION {schema}.claim_turns(
    only_environments text[], after_served bigint, after_turn timestamptz, after_name text,
    how_many integer, include_after boolean)
RETURNS TABLE (name text, served bigint, turn_at timestamptz, nth bigint)
LANGUAGE sql
STABLE
AS $$
    SELECT e.name, e.served, coalesce(e.last_served_at, '-infinity'::timestamptz),
           row_number() OVER (ORDER BY e.served, coalesce(e.last_served_at, '-infinity'::timestamptz),
                                       e.name)
    FROM {schema}.environments e
    WHERE NOT e.drained
      AND NOT e.paused
      AND (e.served, coalesce(e.last_served_at, '-infinity'::timestamptz), e.name)
          >= (after_served, after_turn, after_name)
      AND (include_after
           OR (e.served, coalesce(e.last_served_at, '-infinity'::timestamptz), e.name)
              <> (after_served, after_turn, after_name))
      AND (only_environments IS NULL OR e.name = ANY(only_environments))
    ORDER BY e.served, coalesce(e.last_served_at, '-infinity'::timestamptz), e.name
    LIMIT how_many;
$$;

-- function: environments_with_work
-- The environments with QUEUED runs, by a loose index scan of each queued index (a queued run is
-- in runs_queued_keyless_idx or in runs_queued_key_idx): one descent of an index per
-- environment with queued runs there, never a scan of the runs; the two lists are merged. Each
-- index is skipped through on its own, so the keyed one, which most environments have no entry
-- in, costs what its environments cost (stepping both at once cost two descents for every
-- environment). Its cost grows with the environments with work, so claims make it only in a
-- full scan (a worker's safety net once per poll interval) or when the active environments
-- could not fill them.
CREATE OR REPLACE FUNCTION {schema}.environments_with_work()
RETURNS TABLE (environment text)
LANGUAGE sql
STABLE
AS $$
    WITH RECURSIVE keyless(environment) AS (
        (SELECT r.environment FROM {schema}.runs r
         WHERE r.status = 'QUEUED' AND r.concurrency_key IS NULL
         ORDER BY r.environment LIMIT 1)
        UNION ALL
        SELECT (SELECT r.environment FROM {schema}.runs r
                WHERE r.status = 'QUEUED' AND r.concurrency_key IS NULL
                  AND r.environment > k.environment
                ORDER BY r.environment LIMIT 1)
        FROM keyless k
        WHERE k.environment IS NOT NULL
    ), keyed(environment) AS (
        (SELECT r.environment FROM {schema}.runs r
         WHERE r.status = 'QUEUED' AND r.concurrency_key IS NOT NULL
         ORDER BY r.environment LIMIT 1)
        UNION ALL
        SELECT (SELECT r.environment FROM {schema}.runs r
                WHERE r.status = 'QUEUED' AND r.concurrency_key IS NOT NULL
                  AND r.environment > k.environment
                ORDER BY r.environment LIMIT 1)
        FROM keyed k
        WHERE k.environment IS NOT NULL
    )
    SELECT k.environment FROM keyless k WHERE k.environment IS NOT NULL
    UNION
    SELECT k.environment FROM keyed k WHERE k.environment IS NOT NULL
    ORDER BY 1;
$$;

-- function: mark_environments_active
-- Of `candidate_names`, the drained environments with QUEUED runs join the active ones, level
-- with the least-served active environment: no credit for the time they had nothing to run.
-- Returns the ones it marked, with their new service. Rows other claimers hold are skipped:
-- those claimers charge them and decide `drained` themselves, and a later look finds the rest.
-- The least service is one descent of the turn index.
CREATE OR REPLACE FUNCTION {schema}.mark_environments_active(candidate_names text[])
RETURNS TABLE (name text, served bigint)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH joining AS (
        SELECT j.name FROM {schema}.environments j
        WHERE j.name = ANY(candidate_names) AND j.drained
          AND (SELECT q.id FROM {schema}.queued_run_of(j.name, ARRAY[]::bigint[]) AS q)
              IS NOT NULL
        FOR UPDATE SKIP LOCKED
    )
    UPDATE {schema}.environments AS e
    SET drained = false,
        served = greatest(e.served, coalesce(
            (SELECT min(peer.served) FROM {schema}.environments peer
             WHERE NOT peer.drained AND NOT peer.paused), e.served))
    FROM joining
    WHERE e.name = joining.name
    RETURNING e.name, e.served;
END;
$$;
