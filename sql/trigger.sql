-- name: insert_runs
-- Any number of runs in one statement: each parameter is an array with one element per run,
-- so a bulk trigger is one round trip. Delays use the database clock, not the caller's.
-- Environments and queues get their settings rows on first use; ON CONFLICT DO NOTHING neither
-- writes nor waits when the row exists, even while a claimer holds its lock.
WITH t AS (
    SELECT *
    FROM unnest(
            %(environments)s::text[], %(queues)s::text[], %(tasks)s::text[], %(payloads)s::text[],
            %(priorities)s::integer[], %(max_attempts)s::integer[], %(delays)s::float8[],
            %(tags)s::text[], %(metadata)s::text[], %(machines)s::text[],
            %(max_durations)s::float8[], %(ttls)s::float8[]
         ) WITH ORDINALITY
         AS t(environment, queue, task, payload, priority, max_attempts, delay_s,
              tags, metadata, machine, max_duration_s, requested_ttl_s, ord)
), max_ttl AS (
    SELECT (value #>> '{{}}')::float8 AS seconds FROM {schema}.settings WHERE name = 'max_ttl_s'
), ttl AS (
    -- The configured maximum fills a missing TTL and caps a larger one.
    SELECT t.*,
           CASE WHEN max_ttl.seconds IS NULL THEN t.requested_ttl_s
                ELSE least(coalesce(t.requested_ttl_s, max_ttl.seconds), max_ttl.seconds)
           END AS ttl_s
    FROM t LEFT JOIN max_ttl ON true
), new_environments AS (
    INSERT INTO {schema}.environments (name)
    SELECT DISTINCT environment FROM t
    ON CONFLICT DO NOTHING
), new_queues AS (
    INSERT INTO {schema}.queues (environment, name)
    SELECT DISTINCT environment, queue FROM t
    ON CONFLICT DO NOTHING
)
INSERT INTO {schema}.runs
    (environment, queue, task, payload, status, priority, max_attempts, available_at,
     tags, metadata, machine, max_duration_s, ttl_s, expires_at)
SELECT t.environment,
       t.queue,
       t.task,
       t.payload::jsonb,
       CASE WHEN t.delay_s > 0 THEN 'DELAYED' ELSE 'QUEUED' END,
       t.priority,
       t.max_attempts,
       CASE WHEN t.delay_s > 0 THEN now() + make_interval(secs => t.delay_s) END,
       ARRAY(SELECT jsonb_array_elements_text(t.tags::jsonb)),
       t.metadata::jsonb,
       t.machine,
       t.max_duration_s,
       t.ttl_s,
       -- Armed now only when the run is enqueued now; a delayed run arms it when promoted.
       CASE WHEN coalesce(t.delay_s, 0) <= 0 AND t.ttl_s IS NOT NULL
            THEN now() + make_interval(secs => t.ttl_s) END
FROM ttl AS t
ORDER BY t.ord
RETURNING id;
