-- The batched loop that the periodic jobs working in batches share, written once.

-- function: repeat_in_batches
-- Runs `step(batch_size)`, a function of this schema that takes at most batch_size rows and
-- returns jsonb with `rows` (how many it took) and its own counts, until a step takes fewer
-- than batch_size rows or max_batches steps ran. Returns the steps' results merged key by key
-- (numbers summed, arrays joined without repeats; `rows` left out) and `statements`. Each step is a statement of its own: it locks its batch
-- with a snapshot taken when it starts, and a tick stays bounded however far a job is behind.
CREATE OR REPLACE FUNCTION {schema}.repeat_in_batches(
    step text, batch_size integer, max_batches integer)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    totals jsonb := '{{}}';
    one jsonb;
    statements integer := 0;
BEGIN
    LOOP
        EXECUTE format('SELECT %I.%I($1)', {schema_name}, step) INTO one USING batch_size;
        statements := statements + 1;
        SELECT coalesce(jsonb_object_agg(k, {schema}.merge_counts(totals -> k, one -> k)), '{{}}')
        INTO totals
        FROM (SELECT jsonb_object_keys(totals) UNION SELECT jsonb_object_keys(one)) AS keys(k);
        EXIT WHEN (one ->> 'rows')::integer < batch_size OR statements >= max_batches;
    END LOOP;
    RETURN (totals - 'rows') || jsonb_build_object('statements', statements);
END;
$$;

-- function: merge_counts
-- Two steps' values of one key: numbers add up, arrays join without repeats.
CREATE OR REPLACE FUNCTION {schema}.merge_counts(a jsonb, b jsonb)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE
AS $$
SELECT CASE
    WHEN a IS NULL THEN b
    WHEN b IS NULL THEN a
    WHEN jsonb_typeof(a) = 'array' THEN
        (SELECT coalesce(jsonb_agg(DISTINCT e), '[]') FROM jsonb_array_elements(a || b) AS e)
    ELSE to_jsonb((a #>> '{{}}')::numeric + (b #>> '{{}}')::numeric)
END
$$;
