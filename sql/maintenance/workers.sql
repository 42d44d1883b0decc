-- Periodic job: the rows of workers that are gone are deleted.

-- function: prune_dead_workers
-- Deletes the workers not seen within their own bound, stale_after_s (a worker stores its
-- lease, at least three heartbeat intervals): a worker that crashed, was killed or hangs. One
-- that was only cut off registers again at its next heartbeat tick. The table holds one row
-- per worker, so one statement takes them all.
CREATE OR REPLACE FUNCTION {schema}.prune_dead_workers()
RETURNS jsonb
LANGUAGE sql
AS $$
WITH gone AS (
    DELETE FROM {schema}.workers w
    WHERE w.last_seen_at <= now() - make_interval(secs => w.stale_after_s)
    RETURNING 1
)
SELECT jsonb_build_object('pruned', count(*)) FROM gone;
$$;
