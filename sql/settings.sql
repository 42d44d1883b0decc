-- Engine settings: one row each, read by the SQL functions at every call, so a change applies
-- at the next tick. Values are JSON; null means "none" (no maximum TTL, for instance).

-- name: seed_maintenance_settings
INSERT INTO {schema}.settings (name, value, description) VALUES
    ('max_ttl_s', 'null', 'Maximum TTL of a queued run, seconds: fills a missing TTL, caps a larger one'),
    ('ttl_batch_size', '1000', 'Runs expired per statement by expire_ttl_runs'),
    ('ttl_max_batches', '10', 'Statements per expire_ttl_runs tick'),
    ('max_lease_s', '86400', 'A lease reaching further than this is treated as corrupt by the sweeper'),
    ('prune_retention_s', '604800', 'Finished runs older than this are deleted (default 7 days)'),
    ('prune_batch_size', '1000', 'Runs deleted per statement by prune_finished_runs'),
    ('prune_max_batches', '10', 'Statements per prune_finished_runs tick')
ON CONFLICT (name) DO NOTHING;

-- name: list_settings
SELECT name, value, description FROM {schema}.settings ORDER BY name;

-- name: set_setting
UPDATE {schema}.settings SET value = %(value)s::jsonb WHERE name = %(name)s
RETURNING name, value, description;

-- name: create_setting_function
-- A setting as a number, or the default when it is missing or null.
CREATE OR REPLACE FUNCTION {schema}.numeric_setting(setting_name text, fallback numeric)
RETURNS numeric
LANGUAGE sql
STABLE
AS $$
SELECT coalesce((SELECT (s.value #>> '{{}}')::numeric FROM {schema}.settings s
                 WHERE s.name = setting_name), fallback);
$$;

-- name: seed_trigger_option_settings
INSERT INTO {schema}.settings (name, value, description) VALUES
    ('idempotency_key_ttl_s', '2592000', 'How long an idempotency key stays active when the trigger gives no idempotency_ttl, seconds (default 30 days)'),
    ('debounce_max_delay_s', '600', 'How long after its creation a debounced run can still be pushed back when the trigger gives no max_delay, seconds (default 10 minutes)'),
    ('debounce_prune_batch_size', '5000', 'Stale debounce keys deleted per prune_debounce_keys tick')
ON CONFLICT (name) DO NOTHING;

-- name: remove_trigger_option_settings
DELETE FROM {schema}.settings
WHERE name IN ('idempotency_key_ttl_s', 'debounce_max_delay_s', 'debounce_prune_batch_size');
