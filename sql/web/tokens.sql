-- Tokens made and completed through the HTTP API: each carries the environment that made it.

-- function: create_environment_token
-- create_token, then the token is marked with its environment (a token the library made
-- with the same idempotency key keeps NULL: the caller scopes API keys by environment, so
-- that cannot happen through the API).
CREATE OR REPLACE FUNCTION {schema}.create_environment_token(
    owner text, key text, key_ttl_s float8, timeout_s float8)
RETURNS TABLE (id bigint, environment text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    made bigint;
BEGIN
    made := {schema}.create_token(key, key_ttl_s, timeout_s);
    RETURN QUERY
    UPDATE {schema}.waitpoints w
    SET environment = coalesce(w.environment, owner)
    WHERE w.id = made
    RETURNING w.id, w.environment;
END;
$$;

-- name: create_environment_token
-- params: environment text, key text, key_ttl_s double precision, timeout_s double precision
SELECT id, environment
FROM {schema}.create_environment_token(
    %(environment)s, %(key)s, %(key_ttl_s)s, %(timeout_s)s);

