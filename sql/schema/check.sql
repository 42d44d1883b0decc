-- The start-up check of workers, Clients and the CLI (fairlane.schema.check): which revision
-- the database is at, and the checksums of its installed SQL objects.

-- name: schema_tables_exist
-- params: version_table text, objects_table text
SELECT to_regclass(%(version_table)s) IS NOT NULL AS has_version,
       to_regclass(%(objects_table)s) IS NOT NULL AS has_objects;

-- name: schema_state
SELECT (SELECT v.version_num FROM {schema}.fairlane_alembic_version v LIMIT 1) AS version_num,
       (SELECT coalesce(jsonb_object_agg(o.name, o.checksum), '{{}}'::jsonb)
        FROM {schema}.schema_objects o) AS objects;

-- name: schema_revision
-- A database an older release migrated (no schema_objects table yet).
SELECT version_num FROM {schema}.fairlane_alembic_version LIMIT 1;
