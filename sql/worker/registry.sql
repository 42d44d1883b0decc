-- The workers registry: one row per running worker (fairlane.worker.presence). A worker
-- registers at start, refreshes its row with every heartbeat tick and deletes it at a clean
-- stop; prune_dead_workers (sql/maintenance/workers.sql) deletes the rows of the others.
--
-- A worker is live while its row was seen within its own stale_after_s (its lease, at least
-- three heartbeat intervals) and it is not stopping: past that, every lease it held has lapsed
-- too, and it claims nothing.

-- name: register_worker
-- params: id text, host text, pid integer, version text, tasks text[], environments text[]
-- params: queues text[], concurrency integer, stale_after_s double precision
-- Also when the row is there already (a worker whose row was pruned while it was cut off
-- registers again): what it serves is its own to say.
INSERT INTO {schema}.workers AS w
    (id, host, pid, version, tasks, environments, queues, concurrency, stale_after_s)
VALUES (%(id)s, %(host)s, %(pid)s, %(version)s, %(tasks)s::text[], %(environments)s::text[],
        %(queues)s::text[], %(concurrency)s, %(stale_after_s)s)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, version = excluded.version,
    tasks = excluded.tasks, environments = excluded.environments, queues = excluded.queues,
    concurrency = excluded.concurrency, stale_after_s = excluded.stale_after_s,
    stopping = false, last_seen_at = now()
RETURNING w.id;

-- name: touch_worker
-- params: stopping boolean, id text
-- One heartbeat tick. No row: the worker's row was pruned (it was cut off for longer than
-- its bound) and it registers again.
UPDATE {schema}.workers
SET last_seen_at = now(), stopping = %(stopping)s
WHERE id = %(id)s
RETURNING id;

-- name: deregister_worker
-- params: id text
DELETE FROM {schema}.workers WHERE id = %(id)s
RETURNING id;

-- name: list_workers
-- Every registered worker, live ones first; a row past its bound shows until pruned.
SELECT w.id, w.host, w.pid, w.version, w.tasks, w.environments, w.queues, w.concurrency,
       w.stopping, w.started_at, w.last_seen_at,
       w.last_seen_at > now() - make_interval(secs => w.stale_after_s) AS live
FROM {schema}.workers w
ORDER BY live DESC, w.started_at, w.id;

-- name: unserved_tasks
-- params: head bigint, max_rows bigint
-- The tasks, per environment, with QUEUED runs that no live worker serves: none has a handler
-- for the task AND serves the run's environment and queue (NULL environments or queues: all).
--
-- It reads the first `head` runs of each queue in queue order (queue_head_runs), never the
-- whole backlog: a run no worker serves is passed over by every claim, so it reaches its
-- queue's head and shows there. Behind a backlog deeper than `head` a new unserved task shows
-- once the backlog has drained to it. `runs` counts what those heads hold. DELAYED runs are
-- left out: promotion queues the due ones within a tick. The queues holding QUEUED runs are
-- found by skipping from one to the next (`waiting`: next_queued_queue, a descent of each
-- queued index per such queue), so empty queues cost nothing: 100,000 queues, most of them
-- idle, are not 100,000 probes.
WITH RECURSIVE live AS MATERIALIZED (
    SELECT w.tasks, w.environments, w.queues FROM {schema}.serving_workers() AS w
), waiting AS (
    SELECT first.environment, first.queue AS name
    FROM {schema}.next_queued_queue('', '') AS first
    UNION ALL
    SELECT later.environment, later.queue
    FROM waiting w
    CROSS JOIN LATERAL {schema}.next_queued_queue(w.environment, w.name) AS later
)
SELECT q.environment, head.task, array_agg(DISTINCT q.name ORDER BY q.name) AS queues,
       count(*) AS runs, min(head.queued_at) AS oldest_queued_at
FROM waiting q
CROSS JOIN LATERAL {schema}.queue_head_runs(q.environment, q.name, %(head)s) AS head
WHERE NOT EXISTS (
    SELECT 1 FROM live w
    WHERE {schema}.worker_serves(w.tasks, w.environments, w.queues, head.task, q.environment,
                                 q.name)
)
GROUP BY q.environment, head.task
ORDER BY min(head.queued_at), q.environment, head.task
LIMIT %(max_rows)s;

-- name: task_served
-- params: task text, environment text, queue text
-- Whether a live worker serves `task` in `environment` and `queue` (`fairlane trigger`).
SELECT EXISTS (
    SELECT 1 FROM {schema}.serving_workers() AS w
    WHERE {schema}.worker_serves(w.tasks, w.environments, w.queues, %(task)s, %(environment)s,
                                 %(queue)s)
) AS served;

-- function: serving_workers
-- The workers that serve now: seen within their bound and not stopping.
CREATE OR REPLACE FUNCTION {schema}.serving_workers()
RETURNS TABLE (tasks text[], environments text[], queues text[])
LANGUAGE sql
STABLE
AS $$
SELECT w.tasks, w.environments, w.queues
FROM {schema}.workers w
WHERE NOT w.stopping
  AND w.last_seen_at > now() - make_interval(secs => w.stale_after_s);
$$;

-- function: worker_serves
-- Whether a worker with these tasks, environments and queues (NULL: all) serves a run of
-- `task` in `environment` and `queue`: the one rule the unserved view and `task_served` read.
CREATE OR REPLACE FUNCTION {schema}.worker_serves(
    tasks text[], environments text[], queues text[], task text, environment text, queue text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
AS $$
SELECT task = ANY(tasks)
   AND (environments IS NULL OR environment = ANY(environments))
   AND (queues IS NULL OR queue = ANY(queues));
$$;
