-- Engine settings: one row each, read by the SQL functions at every call, so a change applies
-- at the next tick. Values are JSON; null means "none" (no maximum TTL, for instance).
--
-- The readers below are plpgsql, which keeps a statement's plan for the session. A function
-- in SQL that reads a table is never inlined, and PostgreSQL before 18 plans its body again at
-- every execution of the statement that calls it: for one settings lookup, about a tenth of
-- a millisecond of every trigger (tests/sql/test_hot_path_functions.py).

-- name: list_settings
SELECT name, value, description FROM {schema}.settings ORDER BY name;

-- name: set_setting
-- params: value jsonb, name text
UPDATE {schema}.settings SET value = %(value)s::jsonb WHERE name = %(name)s
RETURNING name, value, description;

-- function: numeric_setting
-- A setting as a number, or the default when it is missing or null.
CREATE OR REPLACE FUNCTION {schema}.numeric_setting(setting_name text, fallback numeric)
RETURNS numeric
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN coalesce((SELECT (s.value #>> '{{}}')::numeric FROM {schema}.settings s
                     WHERE s.name = setting_name), fallback);
END;
$$;

-- function: new_environment_limit
-- The concurrency limit an environment gets when a trigger (or anything else that names it
-- first) creates its row: the setting environment_concurrency_limit, 100 as in the seeds'
-- system; JSON null leaves new environments unlimited. An environment's own limit, once set
-- (fairlane limits), is its own.
CREATE OR REPLACE FUNCTION {schema}.new_environment_limit()
RETURNS integer
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN (SELECT (s.value #>> '{{}}')::integer FROM {schema}.settings s
            WHERE s.name = 'environment_concurrency_limit');
END;
$$;

-- function: boolean_setting
-- A setting as a boolean, or the default when it is missing or null.
CREATE OR REPLACE FUNCTION {schema}.boolean_setting(setting_name text, fallback boolean)
RETURNS boolean
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN coalesce((SELECT (s.value #>> '{{}}')::boolean FROM {schema}.settings s
                     WHERE s.name = setting_name), fallback);
END;
$$;
