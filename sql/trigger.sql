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
            %(max_durations)s::float8[]
         ) WITH ORDINALITY
         AS t(environment, queue, task, payload, priority, max_attempts, delay_s,
              tags, metadata, machine, max_duration_s, ord)
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
     tags, metadata, machine, max_duration_s)
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
       t.max_duration_s
FROM t
ORDER BY t.ord
RETURNING id;
