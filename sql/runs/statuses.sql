-- The sets of run statuses the SQL decides on, written once. IMMUTABLE, so the planner folds
-- them into constants where they are used. plpgsql rather than sql: folding calls the function,
-- and a LANGUAGE sql one is parsed and planned on every such call, paid by every UPDATE of runs
-- for the WHEN of runs_complete_waitpoints, where plpgsql keeps its compiled body
-- (bench/sittings/02-the-claim-overlaps-the-write-claims-start-at-a-floor.md). models.py has
-- the final ones (FINAL_STATUSES); tests/sql/test_statuses.py ties both sets to it.

-- function: final_statuses
-- A run in one of these has ended and never changes again (but for an explicit retry).
CREATE OR REPLACE FUNCTION {schema}.final_statuses()
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
AS $$
BEGIN
    RETURN ARRAY['COMPLETED', 'FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED', 'CANCELED',
                 'SYSTEM_FAILURE'];
END;
$$;

-- function: failed_statuses
-- The final statuses of a run that did not succeed and was not cancelled: such a run can be
-- retried, and it frees its idempotency key.
CREATE OR REPLACE FUNCTION {schema}.failed_statuses()
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
AS $$
BEGIN
    RETURN ARRAY['FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED', 'SYSTEM_FAILURE'];
END;
$$;
