-- The filter of the runs list and of bulk actions, written once.

-- function: runs_matching
-- The runs a filter matches, every filter optional (NULL: any): `tags_all` matches runs
-- carrying all of them; `batch` the runs a batch's items made; `idempotency_keys` the runs
-- whose stored key, active or freed, is one of them (RunFilter.query() gives a key's stored
-- forms); `before_id` pages (the last id of the previous page); `since_s` runs created within
-- that many seconds. Batch carrier runs (the reserved `__batches__` queue) are left out unless
-- `include_carriers`. A plain STABLE sql function: the planner inlines it into each statement
-- that reads it, so each keeps its own plan (list_runs walks the primary key backwards).
CREATE OR REPLACE FUNCTION {schema}.runs_matching(
    environment_is text, queue_is text, task_is text, statuses text[], tags_all text[],
    batch bigint, idempotency_keys text[], before_id bigint, since_s double precision,
    include_carriers boolean)
RETURNS SETOF {schema}.runs
LANGUAGE sql
STABLE
AS $$
    SELECT * FROM {schema}.runs r
    WHERE (environment_is IS NULL OR r.environment = environment_is)
      AND (queue_is IS NULL OR r.queue = queue_is)
      AND (task_is IS NULL OR r.task = task_is)
      AND (statuses IS NULL OR r.status = ANY(statuses))
      AND (tags_all IS NULL OR r.tags @> tags_all)
      AND (batch IS NULL OR r.batch_id = batch)
      AND (idempotency_keys IS NULL
           OR r.idempotency_key = ANY(idempotency_keys)
           OR r.inactive_idempotency_key = ANY(idempotency_keys))
      AND (before_id IS NULL OR r.id < before_id)
      AND (since_s IS NULL OR r.created_at >= now() - make_interval(secs => since_s))
      AND (include_carriers OR r.queue <> '__batches__');
$$;
