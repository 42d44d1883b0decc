-- Periodic job: rate buckets that are full again are deleted (sql/claim/key_rates.sql).

-- function: prune_rate_buckets
-- Periodic: a bucket whose full_at passed is full, as a missing row is, so it only takes space.
-- A claim charging one concurrently holds its row: the delete waits for it and re-checks the
-- new full_at, which is in the future, so a charge is never lost. Deletes at most
-- prune_batch_size rows per call and says `behind` when there are more, so the runner calls it
-- again at once.
CREATE OR REPLACE FUNCTION {schema}.prune_rate_buckets()
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    batch integer := {schema}.numeric_setting('prune_batch_size', 5000)::integer;
    pruned integer;
BEGIN
    DELETE FROM {schema}.rate_buckets b
    USING (SELECT s.environment, s.queue, s.concurrency_key
           FROM {schema}.rate_buckets s
           WHERE s.full_at < statement_timestamp()
           LIMIT batch) AS stale
    WHERE b.environment = stale.environment AND b.queue = stale.queue
      AND b.concurrency_key = stale.concurrency_key AND b.full_at < statement_timestamp();
    GET DIAGNOSTICS pruned = ROW_COUNT;
    RETURN jsonb_build_object('pruned', pruned, 'behind', pruned >= batch);
END;
$$;
