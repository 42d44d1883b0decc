-- Dashboard sessions (fairlane.web.dashboard): one row per signed-in browser, keyed by the
-- SHA-256 of the random secret its cookie carries. A session is live while its row exists,
-- its admin key is live, it has not reached its end, and it was last seen within its idle
-- time (the shorter of the one it was opened under and the server's current one).

-- name: open_dashboard_session
-- params: secret_hash text, lifetime_s double precision, idle_s double precision, key_id bigint
-- Only for a live admin key: a key revoked since the sign-in form checked it opens nothing.
INSERT INTO {schema}.dashboard_sessions (secret_hash, key_id, expires_at, idle_s)
SELECT %(secret_hash)s::text, k.id, now() + make_interval(secs => %(lifetime_s)s::float8),
       %(idle_s)s::float8
FROM {schema}.api_keys k
WHERE k.id = %(key_id)s AND k.kind = 'admin' AND k.revoked_at IS NULL
RETURNING secret_hash;

-- name: dashboard_session
-- params: secret_hash text, idle_s double precision, touch boolean, touch_s double precision
-- The admin key of a live session, or no row. When `touch`, last_seen_at moves to now, but
-- only once it is `touch_s` old, so a busy session is not a row update per request.
WITH found AS (
    SELECT s.secret_hash, k.id, k.kind, k.environment, k.name, k.prefix, k.created_at,
           k.last_used_at, k.revoked_at
    FROM {schema}.dashboard_sessions s
    JOIN {schema}.api_keys k ON k.id = s.key_id
    WHERE s.secret_hash = %(secret_hash)s
      AND k.kind = 'admin' AND k.revoked_at IS NULL
      AND s.expires_at > now()
      AND s.last_seen_at > now() - make_interval(secs => least(s.idle_s, %(idle_s)s::float8))
), touched AS (
    UPDATE {schema}.dashboard_sessions s
    SET last_seen_at = now()
    FROM found
    WHERE %(touch)s::boolean AND s.secret_hash = found.secret_hash
      AND s.last_seen_at < now() - make_interval(secs => %(touch_s)s::float8)
)
SELECT id, kind, environment, name, prefix, created_at, last_used_at, revoked_at FROM found;

-- name: close_dashboard_session
-- params: secret_hash text
DELETE FROM {schema}.dashboard_sessions
WHERE secret_hash = %(secret_hash)s
RETURNING secret_hash;
