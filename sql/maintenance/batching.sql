-- The batched loop that the periodic jobs working in batches share, written once.

-- function: repeat_in_batches
-- Runs `step(batch_size)`, a function of this schema that takes at most batch_size rows and
-- returns jsonb with `rows` (how many it took) and its own counts, until a step takes fewer
-- than batch_size rows, max_batches steps ran, or budget_s seconds (when given) are spent.
-- Returns the steps' results merged key by key (numbers summed, arrays joined without
-- repeats; `rows` left out), `statements`, and `behind`: whether it stopped with work left
-- (the last step took a full batch), so the runner makes the job due again at once. Each step
-- is a statement of its own: it locks its batch with a snapshot taken when it starts, and a
-- tick stays bounded however far a job is behind.
CREATE OR REPLACE FUNCTION {schema}.repeat_in_batches(
    step text, batch_size integer, max_batches integer, budget_s numeric DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    totals jsonb := '{{}}';
    one jsonb;
    statements integer := 0;
    started timestamptz := clock_timestamp();
    behind boolean;
BEGIN
    LOOP
        EXECUTE format('SELECT %I.%I($1)', {schema_name}, step) INTO one USING batch_size;
        statements := statements + 1;
        SELECT coalesce(jsonb_object_agg(k, {schema}.merge_counts(totals -> k, one -> k)), '{{}}')
        INTO totals
        FROM (SELECT jsonb_object_keys(totals) UNION SELECT jsonb_object_keys(one)) AS keys(k);
        behind := (one ->> 'rows')::integer >= batch_size;
        EXIT WHEN NOT behind OR statements >= max_batches
                  OR clock_timestamp() - started >= make_interval(secs => budget_s);
    END LOOP;
    RETURN (totals - 'rows') || jsonb_build_object('statements', statements, 'behind', behind);
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
