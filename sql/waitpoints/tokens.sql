-- Tokens: waitpoints that code completes by hand, with an optional idempotency key and timeout.

-- function: create_token
-- A token that code completes by hand. With a key, the live token that has it: the unique
-- index on live keys decides. An INSERT that meets a key another transaction is inserting
-- waits for it; the SELECT after it is a later statement, so it sees that token once
-- committed. An expired key is moved aside first (and again if it expires in between).
CREATE OR REPLACE FUNCTION {schema}.create_token(key text, key_ttl_s float8, timeout_s float8)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    made bigint;
BEGIN
    LOOP
        IF key IS NOT NULL THEN
            UPDATE {schema}.waitpoints AS w
            SET idempotency_key = NULL, inactive_idempotency_key = w.idempotency_key
            WHERE w.kind = 'MANUAL' AND w.idempotency_key = key
              AND w.idempotency_expires_at <= now();
        END IF;
        INSERT INTO {schema}.waitpoints
            (kind, status, idempotency_key, idempotency_expires_at, timeout_at)
        VALUES ('MANUAL', 'PENDING', key,
                CASE WHEN key IS NOT NULL THEN now() + make_interval(secs => key_ttl_s) END,
                CASE WHEN timeout_s IS NOT NULL THEN now() + make_interval(secs => timeout_s) END)
        ON CONFLICT (idempotency_key) WHERE kind = 'MANUAL' AND idempotency_key IS NOT NULL
        DO NOTHING
        RETURNING id INTO made;
        IF made IS NOT NULL THEN
            RETURN made;
        END IF;
        SELECT w.id INTO made FROM {schema}.waitpoints w
        WHERE w.kind = 'MANUAL' AND w.idempotency_key = key;
        IF made IS NOT NULL THEN
            RETURN made;
        END IF;
    END LOOP;
END;
$$;

-- name: create_token
SELECT {schema}.create_token(%(key)s, %(key_ttl_s)s, %(timeout_s)s);

-- name: complete_token
WITH done AS (
    UPDATE {schema}.waitpoints AS w
    SET status = 'COMPLETED', completed_at = now(), is_error = false,
        output = %(output)s::jsonb
    WHERE w.id = %(id)s AND w.kind = 'MANUAL' AND w.status = 'PENDING'
    RETURNING w.id
)
SELECT id, {schema}.wake_waiting_runs(ARRAY[id]) FROM done;

-- name: token_timeout_at_most
UPDATE {schema}.waitpoints
SET timeout_at = least(coalesce(timeout_at, 'infinity'), now() + make_interval(secs => %(timeout_s)s))
WHERE id = %(id)s AND kind = 'MANUAL' AND status = 'PENDING';

-- name: get_token
-- A token (a MANUAL waitpoint): `fairlane tokens show`, waitpoints.get_token, the HTTP API.
SELECT id, environment, status, is_error, output, created_at, completed_at, timeout_at,
       idempotency_key
FROM {schema}.waitpoints
WHERE id = %(id)s AND kind = 'MANUAL';
