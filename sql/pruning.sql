-- function: prune_finished_runs
-- Finished runs older than prune_retention_s are deleted, prune_batch_size at a time, at most
-- prune_max_batches statements per tick, so the hot table stays small without long locks.
CREATE OR REPLACE FUNCTION {schema}.prune_finished_runs()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    retention_s double precision := {schema}.numeric_setting('prune_retention_s', 604800);
    batch_size integer := {schema}.numeric_setting('prune_batch_size', 1000);
    max_batches integer := {schema}.numeric_setting('prune_max_batches', 10);
    deleted integer;
    total integer := 0;
    statements integer := 0;
BEGIN
    LOOP
        WITH old AS (
            SELECT r.id
            FROM {schema}.runs r
            WHERE r.finished_at < now() - make_interval(secs => retention_s)
            ORDER BY r.finished_at
            LIMIT batch_size
            FOR UPDATE SKIP LOCKED
        )
        DELETE FROM {schema}.runs AS r USING old WHERE r.id = old.id;
        GET DIAGNOSTICS deleted = ROW_COUNT;
        total := total + deleted;
        statements := statements + 1;
        EXIT WHEN deleted < batch_size OR statements >= max_batches;
    END LOOP;
    RETURN jsonb_build_object('deleted', total, 'statements', statements);
END;
$$;

