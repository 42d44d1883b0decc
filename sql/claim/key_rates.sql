-- Rate limits per concurrency key. A queue with a rate (queues.rate_limit runs per
-- rate_period_s seconds, bursts of at most rate_burst) gives each of its keys a bucket of its
-- own, and its keyless runs one more (the key ''), so a queue without keys has one rate.
--
-- A bucket is one timestamp: rate_buckets.full_at, when the bucket is full again (the generic
-- cell rate algorithm's theoretical arrival time). At time t it holds
-- burst - (full_at - t) / per_run_s tokens, per_run_s = rate_period_s / rate_limit; starting n
-- runs moves full_at to max(full_at, t) + n * per_run_s. A key without a row, or whose full_at
-- passed, has a full bucket, so only the keys served within the last burst's worth of time have
-- rows, and prune_rate_buckets deletes the others.
--
-- The claim reads a key's bucket where it decides on the key (pick_runs, ring_heads,
-- pick_from_keys, fill_keys: a key without a token is passed over like a key at its limit) and
-- writes it when it starts the runs (start_picked_runs), both under the environment's row lock,
-- which every claim of the environment holds from before its counts until it commits. So no two
-- claims spend the same token, and none reads a bucket another claim is about to charge: there
-- is no write skew. Runs over the rate stay QUEUED and their environment stays active; they
-- start when a claim finds a token (the worker's poll interval bounds how soon: a burst of at
-- least the runs of one poll interval keeps the rate). Every start takes a token: a first
-- attempt, a retry, and a resume after a wait that let go of its worker.

-- function: rate_tokens
-- The whole tokens of a bucket that is full again at `full_at` (NULL: full), at `at`; with no
-- rate (`per_run_s` NULL), no bound. Inlined where it is called (it reads no table).
CREATE OR REPLACE FUNCTION {schema}.rate_tokens(
    full_at timestamptz, at timestamptz, per_run_s double precision, burst integer)
RETURNS integer
LANGUAGE sql
IMMUTABLE
AS $$
SELECT CASE
    WHEN per_run_s IS NULL THEN 2147483647
    WHEN full_at IS NULL OR full_at <= at THEN burst
    -- A hair of slack: full_at was computed in floating point from the same per_run_s.
    ELSE greatest(0, floor(burst - extract(epoch FROM full_at - at)::double precision / per_run_s
                           + 1e-9))::integer
END;
$$;

-- function: key_rate_tokens
-- The tokens of one key's bucket ('' : the keyless runs') of a queue, now (the statement's
-- time, the one start_picked_runs charges at); no bound without a rate. A function with a
-- subquery is never inlined: a statement that asks it of many keys (ring_heads) reads the
-- buckets itself, and one that asks it of every queue calls it only for a queue with a rate.
-- In plpgsql, which keeps its plan for the session, where one in SQL was planned again at every
-- claim that called it (sql/maintenance/settings.sql).
CREATE OR REPLACE FUNCTION {schema}.key_rate_tokens(
    env_name text, queue_name text, the_key text, per_run_s double precision, burst integer)
RETURNS integer
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    full_at timestamptz;
BEGIN
    IF per_run_s IS NOT NULL THEN
        SELECT b.full_at INTO full_at FROM {schema}.rate_buckets b
        WHERE b.environment = env_name AND b.queue = queue_name
          AND b.concurrency_key = the_key;
    END IF;
    -- A plain expression of variables, in which rate_tokens is inlined (passed the subquery
    -- itself, it was called: an argument with a subquery that the body reads twice is not).
    RETURN {schema}.rate_tokens(full_at, statement_timestamp(), per_run_s, burst);
END;
$$;
