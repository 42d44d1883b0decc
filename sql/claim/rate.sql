-- The global rate limit: a token bucket in the scheduler row, checked by the claim.

-- function: take_rate_tokens
-- Token bucket in the scheduler row, refilled by elapsed time up to `rate_burst`. Takes up to
-- `requested` tokens and returns how many it granted. `at` is the time the bucket is asked at,
-- so tests can drive it deterministically.
CREATE OR REPLACE FUNCTION {schema}.take_rate_tokens(requested integer, at timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    bucket record;
    tokens double precision;
    granted integer;
BEGIN
    SELECT rate_limit_per_s, coalesce(rate_burst, rate_limit_per_s) AS burst,
           rate_tokens, rate_refilled_at
    INTO bucket
    FROM {schema}.scheduler WHERE id = 1 FOR UPDATE;
    IF bucket.rate_limit_per_s IS NULL THEN
        RETURN requested;
    END IF;
    tokens := least(bucket.burst, bucket.rate_tokens + bucket.rate_limit_per_s
                    * greatest(0, extract(epoch FROM at - bucket.rate_refilled_at)));
    granted := least(requested, floor(tokens))::integer;
    UPDATE {schema}.scheduler
    SET rate_tokens = tokens - granted,
        rate_refilled_at = greatest(rate_refilled_at, at)
    WHERE id = 1;
    RETURN granted;
END;
$$;

-- function: return_rate_tokens
-- Hand back tokens a claim was granted but found no runs for. plpgsql, as every function a
-- claim calls: a SQL function that is not inlined is planned anew at every call.
CREATE OR REPLACE FUNCTION {schema}.return_rate_tokens(unused integer)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE {schema}.scheduler
    SET rate_tokens = least(coalesce(rate_burst, rate_limit_per_s), rate_tokens + unused)
    WHERE id = 1 AND rate_limit_per_s IS NOT NULL AND unused > 0;
END;
$$;
