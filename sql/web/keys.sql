-- API keys of the HTTP API (fairlane.web): only each key's SHA-256 is stored.

-- name: create_api_key
-- params: kind text, environment text, name text, prefix text, secret_hash text
INSERT INTO {schema}.api_keys (kind, environment, name, prefix, secret_hash)
VALUES (%(kind)s, %(environment)s, %(name)s, %(prefix)s, %(secret_hash)s)
RETURNING id, kind, environment, name, prefix, created_at, last_used_at, revoked_at;

-- name: list_api_keys
-- params: environment text, include_revoked boolean
-- Every key, or an environment's; revoked ones only when asked for.
SELECT id, kind, environment, name, prefix, created_at, last_used_at, revoked_at
FROM {schema}.api_keys
WHERE (%(environment)s::text IS NULL OR environment = %(environment)s::text)
  AND (%(include_revoked)s::boolean OR revoked_at IS NULL)
ORDER BY id;

-- name: revoke_api_key
-- params: id bigint, environment text
-- Revoked at once: the next request with the key is refused, and the dashboard sessions it
-- opened are deleted. No row: no such key (or an environment given that is not the key's).
WITH revoked AS (
    UPDATE {schema}.api_keys
    SET revoked_at = coalesce(revoked_at, now())
    WHERE id = %(id)s AND (%(environment)s::text IS NULL OR environment = %(environment)s::text)
    RETURNING id, kind, environment, name, prefix, created_at, last_used_at, revoked_at
), ended AS (
    DELETE FROM {schema}.dashboard_sessions s
    USING revoked
    WHERE s.key_id = revoked.id
)
SELECT id, kind, environment, name, prefix, created_at, last_used_at, revoked_at FROM revoked;

-- name: authenticate_api_key
-- params: secret_hash text
-- The live key with this hash, if any. Its last use is written at most once a minute, so a
-- busy key does not turn every request into a row update.
WITH found AS (
    SELECT id, kind, environment, name, prefix, created_at, last_used_at, revoked_at
    FROM {schema}.api_keys
    WHERE secret_hash = %(secret_hash)s AND revoked_at IS NULL
), touched AS (
    UPDATE {schema}.api_keys k
    SET last_used_at = now()
    FROM found
    WHERE k.id = found.id
      AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
)
SELECT id, kind, environment, name, prefix, created_at, last_used_at, revoked_at FROM found;
