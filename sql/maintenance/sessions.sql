-- Periodic job: dashboard sessions that ended are deleted.

-- function: prune_dashboard_sessions
-- Deletes the sessions past their end, idle longer than the idle time they were opened
-- under, or whose key was revoked (revoking deletes them already; this catches a key revoked
-- by hand). A refused cookie is refused whether or not its row is still here: this only keeps
-- the table small. At most prune_batch_size rows per tick.
CREATE OR REPLACE FUNCTION {schema}.prune_dashboard_sessions()
RETURNS jsonb
LANGUAGE sql
AS $$
WITH ended AS (
    SELECT s.secret_hash
    FROM {schema}.dashboard_sessions s
    LEFT JOIN {schema}.api_keys k ON k.id = s.key_id AND k.revoked_at IS NULL
    WHERE s.expires_at <= now()
       OR s.last_seen_at <= now() - make_interval(secs => s.idle_s)
       OR k.id IS NULL
    LIMIT {schema}.numeric_setting('prune_batch_size', 1000)::integer
    FOR UPDATE OF s SKIP LOCKED
), pruned AS (
    DELETE FROM {schema}.dashboard_sessions s
    USING ended
    WHERE s.secret_hash = ended.secret_hash
    RETURNING 1
)
SELECT jsonb_build_object('pruned', count(*)) FROM pruned;
$$;
