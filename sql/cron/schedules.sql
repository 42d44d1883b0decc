-- Cron schedules (fairlane.schedules, fired by every worker's periodic loop,
-- fairlane.cron.firing). The cron arithmetic is Python's (fairlane.cron.expressions); the
-- decisions are here: a due schedule is taken under its row lock with SKIP LOCKED, each tick is
-- a row of schedule_fires keyed by (schedule, tick), and next_fire_at moves on in the same
-- transaction. So each tick fires once, however many workers there are.

-- name: upsert_schedule
-- params: environment text, key text, task text, cron text, timezone text, payload jsonb,
-- params: options jsonb, declared boolean, next_fire_at timestamp with time zone
-- Create a schedule, or update the one with this (environment, key). Its next tick is kept
-- unless the cron expression or time zone changed.
INSERT INTO {schema}.schedules AS s
    (environment, key, task, cron, timezone, payload, options, declared, next_fire_at)
VALUES (%(environment)s, %(key)s, %(task)s, %(cron)s, %(timezone)s, %(payload)s::jsonb,
        %(options)s::jsonb, %(declared)s, %(next_fire_at)s)
ON CONFLICT (environment, key) DO UPDATE
SET task = EXCLUDED.task,
    payload = EXCLUDED.payload,
    options = EXCLUDED.options,
    declared = EXCLUDED.declared,
    next_fire_at = CASE WHEN s.cron = EXCLUDED.cron AND s.timezone = EXCLUDED.timezone
                        THEN s.next_fire_at ELSE EXCLUDED.next_fire_at END,
    cron = EXCLUDED.cron,
    timezone = EXCLUDED.timezone
RETURNING s.id;

-- name: lock_due_schedules
-- params: now timestamp with time zone, limit bigint
-- Due schedules, oldest tick first, each locked; a worker firing one skips the others' rows.
-- Due by the clock given (tests fire at chosen instants), else by the transaction's now().
SELECT s.id, s.environment, s.key, s.task, s.cron, s.timezone, s.payload, s.options,
       s.next_fire_at, coalesce(%(now)s::timestamptz, now()) AS now
FROM {schema}.schedules AS s
WHERE NOT s.paused AND s.next_fire_at <= coalesce(%(now)s::timestamptz, now())
ORDER BY s.next_fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: record_schedule_fire
-- params: schedule_id bigint, tick timestamp with time zone
-- Claim a tick of a schedule; no row when it fired already (a run per tick, never two).
INSERT INTO {schema}.schedule_fires (schedule_id, tick)
VALUES (%(schedule_id)s, %(tick)s)
ON CONFLICT DO NOTHING
RETURNING schedule_id;

-- name: schedule_fired
-- params: ticks timestamp with time zone[], run_ids bigint[], schedule_id bigint,
-- params: next_fire_at timestamp with time zone, last_tick timestamp with time zone,
-- params: last_run_id bigint
-- After the ticks a firing took: the run each made, the next tick, and the fires older than
-- the retention (prune_retention_s) deleted.
WITH fired AS (
    UPDATE {schema}.schedule_fires AS f
    SET run_id = made.run_id
    FROM unnest(%(ticks)s::timestamptz[], %(run_ids)s::bigint[]) AS made(tick, run_id)
    WHERE f.schedule_id = %(schedule_id)s AND f.tick = made.tick
    RETURNING f.tick
), pruned AS (
    DELETE FROM {schema}.schedule_fires AS f
    WHERE f.schedule_id = %(schedule_id)s
      AND f.tick < now() - make_interval(
          secs => {schema}.numeric_setting('prune_retention_s', 604800))
    RETURNING f.tick
)
UPDATE {schema}.schedules AS s
SET next_fire_at = %(next_fire_at)s,
    last_tick = coalesce(%(last_tick)s, s.last_tick),
    last_run_id = coalesce(%(last_run_id)s, s.last_run_id)
WHERE s.id = %(schedule_id)s
  AND (SELECT count(*) FROM fired) >= 0 AND (SELECT count(*) FROM pruned) >= 0
RETURNING s.id;

-- name: list_schedules
-- params: environment text
SELECT id, environment, key, task, cron, timezone, payload, options, declared, paused,
       next_fire_at, last_tick, last_run_id, created_at
FROM {schema}.schedules
WHERE (%(environment)s::text IS NULL OR environment = %(environment)s::text)
ORDER BY environment, key;

-- name: get_schedule
-- params: environment text, key text
SELECT id, environment, key, task, cron, timezone, payload, options, declared, paused,
       next_fire_at, last_tick, last_run_id, created_at
FROM {schema}.schedules
WHERE environment = %(environment)s AND key = %(key)s;

-- name: set_schedule_paused
-- params: paused boolean, next_fire_at timestamp with time zone, environment text, key text
-- Pause, or resume from the given next tick (the ticks missed while paused are not fired).
UPDATE {schema}.schedules
SET paused = %(paused)s,
    next_fire_at = coalesce(%(next_fire_at)s, next_fire_at)
WHERE environment = %(environment)s AND key = %(key)s
RETURNING id;

-- name: delete_schedule
-- params: environment text, key text
DELETE FROM {schema}.schedules
WHERE environment = %(environment)s AND key = %(key)s
RETURNING id;

-- name: schedule_fire_ticks
-- params: schedule_id bigint
-- The ticks a schedule fired, oldest first (for operators and tests).
SELECT f.tick, f.run_id
FROM {schema}.schedule_fires AS f
WHERE f.schedule_id = %(schedule_id)s
ORDER BY f.tick;
