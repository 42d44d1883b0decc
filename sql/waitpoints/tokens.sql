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
-- params: key text, key_ttl_s double precision, timeout_s double precision
SELECT {schema}.create_token(%(key)s, %(key_ttl_s)s, %(timeout_s)s);

-- function: wake_at_commit
-- Notes a token this transaction completed; the runs waiting on it are woken at its commit
-- (wake_tokens_at_commit), with those of every other token it completed. A caller's
-- transaction may complete any number of tokens, one statement each, in any order: woken
-- statement by statement, their waiting runs were locked in the order of the calls, against
-- a heartbeat that locks them in descending id order (docs/concurrency.md, lock order 9).
-- Returns the token.
CREATE OR REPLACE FUNCTION {schema}.wake_at_commit(token bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    list_name text := 'fairlane_wake_at_commit.' || {schema_name};
BEGIN
    PERFORM set_config(list_name, concat_ws(',', nullif(current_setting(list_name, true), ''),
                                            token), true);
    RETURN token;
END;
$$;

-- function: wake_tokens_at_commit
-- At commit, the first of the deferred row events of the tokens this transaction completed
-- wakes the runs waiting on all of them at once (wake_waiting_runs: one statement, runs in
-- descending id order); the others find the list empty. A rolled-back subtransaction takes
-- its tokens off the list with its other settings.
CREATE OR REPLACE FUNCTION {schema}.wake_tokens_at_commit()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM {schema}.wake_listed_waitpoints('fairlane_wake_at_commit.' || {schema_name});
    RETURN NULL;
END;
$$;

-- trigger: tokens_wake_at_commit
CREATE CONSTRAINT TRIGGER tokens_wake_at_commit
AFTER UPDATE OF status ON {schema}.waitpoints
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW
WHEN (NEW.kind = 'MANUAL' AND NEW.status = 'COMPLETED' AND OLD.status = 'PENDING')
EXECUTE FUNCTION {schema}.wake_tokens_at_commit();

-- name: complete_token
-- params: output jsonb, id bigint
-- The waiting runs are woken when the caller's transaction commits (wake_at_commit).
WITH done AS (
    UPDATE {schema}.waitpoints AS w
    SET status = 'COMPLETED', completed_at = now(), is_error = false,
        output = %(output)s::jsonb
    WHERE w.id = %(id)s AND w.kind = 'MANUAL' AND w.status = 'PENDING'
    RETURNING w.id
)
SELECT {schema}.wake_at_commit(done.id) AS id FROM done;

-- name: token_timeout_at_most
-- params: timeout_s double precision, id bigint
UPDATE {schema}.waitpoints
SET timeout_at = least(coalesce(timeout_at, 'infinity'), now() + make_interval(secs => %(timeout_s)s))
WHERE id = %(id)s AND kind = 'MANUAL' AND status = 'PENDING';

-- name: get_token
-- params: id bigint
-- A token (a MANUAL waitpoint): `fairlane tokens show`, waitpoints.get_token, the HTTP API.
SELECT id, environment, status, is_error, output, created_at, completed_at, timeout_at,
       idempotency_key
FROM {schema}.waitpoints
WHERE id = %(id)s AND kind = 'MANUAL';
