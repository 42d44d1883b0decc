-- The sets of run statuses the SQL decides on, written once. IMMUTABLE and LANGUAGE sql, so
-- the planner folds them into constants where they are used. models.py has the same sets
-- (FINAL_STATUSES, FAILED_STATUSES); tests/unit tie the two together.

-- function: final_statuses
-- A run in one of these has ended and never changes again (but for an explicit retry).
CREATE OR REPLACE FUNCTION {schema}.final_statuses()
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
SELECT ARRAY['COMPLETED', 'FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED', 'CANCELED',
             'SYSTEM_FAILURE']
$$;

-- function: failed_statuses
-- The final statuses of a run that did not succeed and was not cancelled: such a run can be
-- retried, and it frees its idempotency key.
CREATE OR REPLACE FUNCTION {schema}.failed_statuses()
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
SELECT ARRAY['FAILED', 'CRASHED', 'TIMED_OUT', 'EXPIRED', 'SYSTEM_FAILURE']
$$;
