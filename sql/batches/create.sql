-- Batches: created in one call (charged to the environment's token bucket), filled with items
-- in any number of calls, sealed when all run_count items are in. Each item becomes a carrier
-- run of the built-in task fairlane.batch_item in the environment's reserved queue __batches__
-- (its concurrency_limit is the environment's batch concurrency), so the fair scheduler
-- processes batches: DRR across environments, caps per environment. The carrier's handler
-- turns the item into its run under the item's row lock (one run per item, see
-- fairlane/batches/processing.py); oversized items become pre-failed runs at ingest.

-- function: create_batch
-- Phase one. Outcomes: CREATED, EXISTING (the idempotency key names a batch of the
-- environment; nothing charged), RATE_LIMITED (retry_after_s until the bucket holds run_count
-- tokens), TOO_MANY (run_count above batch_max_items, which is returned as `limit_value`).
-- The bucket row is locked first, so concurrent creations of one environment take turns.
CREATE OR REPLACE FUNCTION {schema}.create_batch(
    env text, wanted integer, parent bigint, key text)
RETURNS TABLE (batch_id bigint, outcome text, retry_after_s float8, limit_value float8)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    max_items integer := {schema}.numeric_setting('batch_max_items', 1000)::integer;
    cfg record;
    bucket record;
    available float8;
    existing bigint;
    new_id bigint;
    new_waitpoint bigint;
BEGIN
    IF wanted > max_items OR wanted < 1 THEN
        RETURN QUERY SELECT NULL::bigint, 'TOO_MANY'::text, NULL::float8, max_items::float8;
        RETURN;
    END IF;
    INSERT INTO {schema}.environments (name, concurrency_limit)
    VALUES (env, {schema}.new_environment_limit()) ON CONFLICT DO NOTHING;
    SELECT coalesce(e.batch_refill_amount,
                    {schema}.numeric_setting('batch_refill_amount', 10))::float8 AS amount,
           coalesce(e.batch_refill_interval_s,
                    {schema}.numeric_setting('batch_refill_interval_s', 10))::float8 AS every,
           coalesce(e.batch_bucket_max,
                    {schema}.numeric_setting('batch_bucket_max', 1200))::float8 AS most,
           coalesce(e.batch_concurrency,
                    {schema}.numeric_setting('batch_concurrency', 10))::integer AS concurrency
    INTO cfg
    FROM {schema}.environments e WHERE e.name = env;
    INSERT INTO {schema}.batch_buckets (environment, tokens, refilled_at)
    VALUES (env, cfg.most, now())
    ON CONFLICT (environment) DO NOTHING;
    SELECT b.tokens, b.refilled_at INTO bucket
    FROM {schema}.batch_buckets b WHERE b.environment = env FOR UPDATE;
    IF key IS NOT NULL THEN
        SELECT b.id INTO existing
        FROM {schema}.batches b WHERE b.environment = env AND b.idempotency_key = key;
        IF existing IS NOT NULL THEN
            RETURN QUERY SELECT existing, 'EXISTING'::text, NULL::float8, NULL::float8;
            RETURN;
        END IF;
    END IF;
    available := least(cfg.most, bucket.tokens
        + extract(epoch FROM now() - bucket.refilled_at) / greatest(cfg.every, 0.001) * cfg.amount);
    IF available < wanted THEN
        UPDATE {schema}.batch_buckets b SET tokens = available, refilled_at = now()
        WHERE b.environment = env;
        RETURN QUERY SELECT NULL::bigint, 'RATE_LIMITED'::text,
            CASE WHEN cfg.amount > 0 AND wanted <= cfg.most
                 THEN (wanted - available) / cfg.amount * cfg.every END,
            cfg.most;
        RETURN;
    END IF;
    UPDATE {schema}.batch_buckets b SET tokens = available - wanted, refilled_at = now()
    WHERE b.environment = env;
    INSERT INTO {schema}.queues AS q (environment, name, concurrency_limit)
    VALUES (env, '__batches__', cfg.concurrency)
    ON CONFLICT (environment, name) DO UPDATE SET concurrency_limit = EXCLUDED.concurrency_limit
    WHERE q.concurrency_limit IS DISTINCT FROM EXCLUDED.concurrency_limit;
    IF parent IS NOT NULL THEN
        INSERT INTO {schema}.waitpoints (kind, status) VALUES ('BATCH', 'PENDING')
        RETURNING id INTO new_waitpoint;
    END IF;
    INSERT INTO {schema}.batches
        (environment, run_count, idempotency_key, parent_run_id, waitpoint_id, seal_deadline)
    VALUES (env, wanted, key, parent, new_waitpoint,
            now() + make_interval(secs => {schema}.numeric_setting('batch_seal_timeout_s', 1800)))
    RETURNING id INTO new_id;
    RETURN QUERY SELECT new_id, 'CREATED'::text, NULL::float8, NULL::float8;
END;
$$;

-- name: create_batch
-- params: environment text, run_count integer, parent_run_id bigint, idempotency_key text
SELECT batch_id, outcome, retry_after_s, limit_value
FROM {schema}.create_batch(%(environment)s, %(run_count)s, %(parent_run_id)s,
                           %(idempotency_key)s);

-- name: set_environment_batch_limits
-- params: environment text
INSERT INTO {schema}.environments (name, concurrency_limit)
VALUES (%(environment)s, {schema}.new_environment_limit()) ON CONFLICT DO NOTHING;

-- name: update_environment_batch_limits
-- params: refill_amount double precision, refill_interval_s double precision,
-- params: bucket_max double precision, concurrency integer, environment text
UPDATE {schema}.environments
SET batch_refill_amount = %(refill_amount)s, batch_refill_interval_s = %(refill_interval_s)s,
    batch_bucket_max = %(bucket_max)s, batch_concurrency = %(concurrency)s
WHERE name = %(environment)s
RETURNING batch_concurrency;

-- name: sync_batch_queue_concurrency
-- params: concurrency integer, environment text
-- Sent before the environment's row is created or updated: queue rows come before
-- environment rows in the global lock order (docs/concurrency.md). Like any change of a
-- queue's cap (sql/limits/limits.sql), a raised one may make queued carriers claimable: it
-- wakes the environment's idle workers.
WITH changed AS (
    UPDATE {schema}.queues AS q
    SET concurrency_limit = coalesce(%(concurrency)s::integer,
                                     {schema}.numeric_setting('batch_concurrency', 10)::integer)
    WHERE q.environment = %(environment)s AND q.name = '__batches__'
    RETURNING q.environment, q.paused
)
SELECT count(pg_notify({channel}, c.environment)) FROM changed c WHERE NOT c.paused;
