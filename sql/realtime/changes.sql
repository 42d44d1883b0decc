-- Realtime: the changes an HTTP server's event streams follow (fairlane.web.realtime). A run
-- that changes status, metadata or batch, and every inserted run, is announced on the changes
-- channel by its id alone; a server re-reads what it needs, coalescing bursts, with one
-- short pooled read. Ids only: a payload is at most 8,000 bytes and carries nothing a
-- listener of another tenant could read.
--
-- The two statements that change most runs announce their own, a notice per 300 runs: the
-- claim starting runs (start_picked_runs, QUEUED to EXECUTING) and the worker's completions
-- (complete_runs, EXECUTING to COMPLETED). A notice per run there was a large part of the
-- server's work in a drain (bench/sittings/44-run-announcements-set-based.md): the row
-- trigger's queued event and function call, and at commit thousands of notices to write and
-- for every listening session to read. Each of them sets
-- fairlane.runs_announced for its transaction before it changes a run, and the row trigger
-- passes over exactly those two transitions while it is set: a completion written by a worker
-- of an earlier release during a rolling deploy (its complete_runs announces nothing) is
-- still announced, by the trigger. Only those two statements make those two transitions, and
-- each announces every run it changes, so the setting outliving the statement in its
-- transaction hides nothing.

-- function: announce_runs
-- A notice per 300 ids (a bigint is at most 20 bytes with its comma): under the 8,000 bytes a
-- payload may hold.
CREATE OR REPLACE FUNCTION {schema}.announce_runs(ids bigint[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify({changes_channel}, chunk.ids)
    FROM (SELECT string_agg(numbered.id::text, ',') AS ids
          FROM (SELECT ordered.id, (ordered.nth - 1) / 300 AS part
                FROM unnest(ids) WITH ORDINALITY AS ordered(id, nth)) AS numbered
          GROUP BY numbered.part) AS chunk;
END;
$$;

-- function: notify_run_changed
-- One notice per changed row; PostgreSQL folds equal notices of one transaction into one, so a
-- run changed twice before its commit is announced once.
CREATE OR REPLACE FUNCTION {schema}.notify_run_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify({changes_channel}, NEW.id::text);
    RETURN NULL;
END;
$$;

-- trigger: runs_notify_changed
-- Only the columns a stream shows: a heartbeat (lease_until) or a claim's bookkeeping columns
-- alone fire nothing; nor do the two transitions whose statements announced their runs
-- themselves (above).
CREATE TRIGGER runs_notify_changed
AFTER UPDATE OF status, metadata, batch_id ON {schema}.runs
FOR EACH ROW
WHEN ((OLD.status IS DISTINCT FROM NEW.status
       AND NOT ((OLD.status = 'QUEUED' AND NEW.status = 'EXECUTING'
                 OR OLD.status = 'EXECUTING' AND NEW.status = 'COMPLETED')
                AND current_setting('fairlane.runs_announced', true) = 'on'))
      OR OLD.metadata IS DISTINCT FROM NEW.metadata
      OR OLD.batch_id IS DISTINCT FROM NEW.batch_id)
EXECUTE FUNCTION {schema}.notify_run_changed();

-- function: notify_runs_created
-- Per statement: a bulk insert is a notice per 300 runs, not a notice per row.
CREATE OR REPLACE FUNCTION {schema}.notify_runs_created()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM {schema}.announce_runs(ARRAY(SELECT created.id FROM created_runs AS created));
    RETURN NULL;
END;
$$;

-- trigger: runs_notify_created
CREATE TRIGGER runs_notify_created
AFTER INSERT ON {schema}.runs
REFERENCING NEW TABLE AS created_runs
FOR EACH STATEMENT
EXECUTE FUNCTION {schema}.notify_runs_created();

-- name: listen_changes_channel
LISTEN {changes_channel_identifier};

-- name: route_changed_runs
-- params: ids bigint[]
-- Where each announced run belongs, for the streams of a tag or a batch: one index probe per id.
SELECT id, environment, tags, batch_id
FROM {schema}.runs
WHERE id = ANY(%(ids)s::bigint[]);

-- name: runs_by_ids
-- params: ids bigint[], environment text
-- The runs a stream was told changed, in the stream's environment (NULL: an admin's, any).
SELECT id, environment, queue, task, payload, status, priority, attempts, max_attempts,
       available_at, created_at, started_at, finished_at, lease_token, lease_until, worker_id,
       result, error, tags, metadata, machine, max_duration_s, parent_run_id, idempotency_key,
       idempotency_key_expires_at, queued_at, queue_order, attempt_errors
FROM {schema}.runs
WHERE id = ANY(%(ids)s::bigint[])
  AND (%(environment)s::text IS NULL OR environment = %(environment)s::text)
ORDER BY id;

-- name: batch_runs
-- params: batch_id bigint, limit bigint
-- A batch's runs, newest first (the batch items index), for a batch stream's first state.
SELECT id, environment, queue, task, payload, status, priority, attempts, max_attempts,
       available_at, created_at, started_at, finished_at, lease_token, lease_until, worker_id,
       result, error, tags, metadata, machine, max_duration_s, parent_run_id, idempotency_key,
       idempotency_key_expires_at, queued_at, queue_order, attempt_errors
FROM {schema}.runs
WHERE batch_id = %(batch_id)s
ORDER BY batch_index DESC
LIMIT %(limit)s;
