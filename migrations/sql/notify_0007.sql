-- The notification of inserted runs as a statement trigger, as it stood from revision 0001 to
-- 0007: 0001 installs it from here and 0008's downgrade restores it. Since 0008 the statements
-- that insert runs notify themselves (cheaper on the trigger's path). Frozen: never edit these
-- to follow later changes.

-- name: notify_runs_inserted
-- One notification per environment per inserting statement, not one per run.
CREATE OR REPLACE FUNCTION {schema}.notify_runs_inserted()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.runs', envs.environment)
    FROM (SELECT DISTINCT environment FROM new_runs WHERE status = 'QUEUED') AS envs;
    RETURN NULL;
END;
$$;

-- name: runs_inserted_trigger
CREATE TRIGGER runs_notify_inserted
AFTER INSERT ON {schema}.runs
REFERENCING NEW TABLE AS new_runs
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_runs_inserted();
