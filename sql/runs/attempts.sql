-- A run's failed attempts. `error` holds the last attempt's error; `attempt_errors` keeps the
-- errors of the most recent ATTEMPT_ERRORS_KEPT failed attempts in full, newest last, and the
-- number of older ones it dropped, so a run retried many times keeps a bounded row. Every
-- statement that ends an attempt with an error (fail_runs, lease reclaim, the concurrency
-- sweeper) appends through this one function.

-- function: with_attempt_error
-- `history` with one more failed attempt: {"earlier": n, "attempts": [{"attempt", "failed_at",
-- "error"}, ...]}, at most 10 attempts kept. plpgsql, so its compiled body is kept per session.
CREATE OR REPLACE FUNCTION {schema}.with_attempt_error(history jsonb, attempt integer,
                                                      error jsonb)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    kept constant integer := 10;
    attempts jsonb := coalesce(history -> 'attempts', '[]'::jsonb)
        || jsonb_build_array(jsonb_build_object(
               'attempt', attempt, 'failed_at', now(), 'error', error));
    dropped integer := greatest(jsonb_array_length(attempts) - kept, 0);
BEGIN
    RETURN jsonb_build_object(
        'earlier', coalesce((history ->> 'earlier')::integer, 0) + dropped,
        'attempts', CASE WHEN dropped = 0 THEN attempts
                         ELSE jsonb_path_query_array(attempts, '$[last - 9 to last]') END);
END;
$$;
