-- Concurrency keys: a queue's runs split by runs.concurrency_key, each key with its own copy
-- of the queue's concurrency_limit (keyless runs are one more key), and queues.total_limit
-- bounding the queue across them. pick_from_environment (sql/claim/claim.sql) hands a queue
-- here when it has queued runs with a key (a keyed queue); a queue without any is walked as
-- before, and keyless runs cost nothing more.
--
-- Slots per key are derived like every slot: the EXECUTING runs of the key (and WAITING ones
-- owed a resume), counted by pick_from_environment under the environment's row lock, which
-- every claim of the environment takes before it counts. So no two claims count a key at once,
-- and no count misses a committed claim: there is no per-key counter to leak or skew.
--
-- Fairness inside the queue is round robin over its keys, in key order from where the last
-- claim there stopped (queues.key_cursor, written under the same row lock): the first ring
-- takes one run of each key with room, in its queue order; the keyless runs come after the
-- last key. A ring that leaves room comes back to the keys that gave a run, which take turns
-- again, each an even share of what is left per turn. A key with 10,000 queued runs takes one turn in the ring as a key with 10 does.
-- Each step of the ring is one descent of runs_queued_key_idx (the next key after the last
-- one), and a key at its limit is stepped over by the next descent, never walked.
--
-- Keyless runs of a keyed queue are in runs_queued_idx only (keyless runs stay out of the key
-- index, so that the common case pays nothing for keys): their turn reads the queue's first
-- `keyless_window` queued runs in queue order and takes the keyless ones among them. Keyless
-- runs behind more keyed runs than that wait for the keyed runs ahead of them to start.

-- function: next_queue_key
-- The first key after `after` (and not past `upto`, when given) of a queue with queued runs
-- with a key: one descent of runs_queued_key_idx.
CREATE OR REPLACE FUNCTION {schema}.next_queue_key(
    env_name text, queue_name text, after text, upto text)
RETURNS text
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF upto IS NULL THEN
        RETURN (SELECT r.concurrency_key FROM {schema}.runs r
                WHERE r.environment = env_name AND r.queue = queue_name
                  AND r.status = 'QUEUED' AND r.concurrency_key > after
                ORDER BY r.concurrency_key LIMIT 1);
    END IF;
    RETURN (SELECT r.concurrency_key FROM {schema}.runs r
            WHERE r.environment = env_name AND r.queue = queue_name
              AND r.status = 'QUEUED' AND r.concurrency_key > after
              AND r.concurrency_key <= upto
            ORDER BY r.concurrency_key LIMIT 1);
END;
$$;

-- function: pick_key_runs
-- Up to `n` claimable runs of one key of a queue (`the_key` NULL: its keyless runs, among its
-- first `keyless_window` queued runs), in queue order, locked (FOR UPDATE SKIP LOCKED), none of
-- `taken`. The filters are pick_from_environment's (TTL, the claimer's tasks).
CREATE OR REPLACE FUNCTION {schema}.pick_key_runs(
    env_name text, queue_name text, the_key text, n integer, taken bigint[],
    only_tasks text[], keyless_window integer)
RETURNS TABLE (id bigint, queue_order timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    IF n <= 0 THEN
        RETURN;
    END IF;
    IF the_key IS NOT NULL THEN
        RETURN QUERY
        SELECT r.id, r.queue_order FROM {schema}.runs r
        WHERE r.environment = env_name AND r.queue = queue_name AND r.status = 'QUEUED'
          AND r.concurrency_key = the_key
          AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
          AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
          AND r.id <> ALL (taken)
        ORDER BY r.queue_order, r.id
        LIMIT n
        FOR UPDATE SKIP LOCKED;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.id, r.queue_order FROM {schema}.runs r
    WHERE r.id IN (SELECT head.id FROM {schema}.runs head
                   WHERE head.environment = env_name AND head.queue = queue_name
                     AND head.status = 'QUEUED'
                   ORDER BY head.queue_order, head.id
                   LIMIT keyless_window)
      AND r.status = 'QUEUED' AND r.concurrency_key IS NULL
      AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
      AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
      AND r.id <> ALL (taken)
    ORDER BY r.queue_order, r.id
    LIMIT n
    FOR UPDATE SKIP LOCKED;
END;
$$;

-- function: pick_from_keys
-- Up to `room` runs of a keyed queue, round robin over its keys from queues.key_cursor, each key
-- within `key_limit` (NULL: none) less its slot holders (`held_keys`, `held_counts`: this
-- queue's keys that hold slots; `keyless_held` for its keyless runs). The caller holds the
-- environment's row lock. The ring's steps are positions: a key, or '' for the keyless runs
-- (keys are never empty), which come after the last key.
CREATE OR REPLACE FUNCTION {schema}.pick_from_keys(
    env_name text, queue_name text, key_limit integer, room integer, held_keys text[],
    held_counts integer[], keyless_held integer, only_tasks text[])
RETURNS TABLE (id bigint, queue_order timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    start text;
    pos text;
    wrapped boolean := false;
    key_room integer;
    got bigint[];
    taken bigint[] := '{{}}';
    orders timestamptz[] := '{{}}';
    more_keys text[] := '{{}}';
    more_room integer[] := '{{}}';
    next_keys text[];
    next_room integer[];
    share integer;
    i integer;
BEGIN
    SELECT coalesce(q.key_cursor, '') INTO start FROM {schema}.queues q
    WHERE q.environment = env_name AND q.name = queue_name;
    pos := start;
    LOOP
        EXIT WHEN room <= 0;
        pos := {schema}.next_queue_key(env_name, queue_name, pos,
                                       CASE WHEN wrapped THEN start END);
        IF pos IS NULL THEN
            EXIT WHEN wrapped;  -- back where the ring started
            wrapped := true;
            pos := '';
        END IF;
        key_room := coalesce(key_limit, 2147483647) - CASE WHEN pos = '' THEN keyless_held
            ELSE coalesce(held_counts[array_position(held_keys, pos)], 0) END;
        SELECT coalesce(array_agg(p.id), '{{}}'), coalesce(array_agg(p.queue_order), '{{}}')
        INTO got, orders
        FROM (SELECT p.id, p.queue_order FROM {schema}.pick_key_runs(
                  env_name, queue_name, nullif(pos, ''), least(key_room, 1), taken,
                  only_tasks, 1000) AS p) AS p;
        IF cardinality(got) > 0 THEN
            RETURN QUERY SELECT got[1], orders[1];
            taken := taken || got;
            room := room - 1;
            IF key_room > 1 THEN
                more_keys := more_keys || pos;
                more_room := more_room || (key_room - 1);
            END IF;
        END IF;
        EXIT WHEN pos = start AND wrapped;
    END LOOP;
    UPDATE {schema}.queues q SET key_cursor = nullif(pos, '')
    WHERE q.environment = env_name AND q.name = queue_name
      AND q.key_cursor IS DISTINCT FROM nullif(pos, '') AND pos IS NOT NULL;
    -- The ring came round with room left: the keys that gave a run take turns again, each an
    -- even share of the room left per turn, until the room or their runs run out.
    WHILE room > 0 AND cardinality(more_keys) > 0 LOOP
        share := greatest(1, room / cardinality(more_keys));
        next_keys := '{{}}';
        next_room := '{{}}';
        FOR i IN 1 .. cardinality(more_keys) LOOP
            EXIT WHEN room <= 0;
            SELECT coalesce(array_agg(p.id), '{{}}'), coalesce(array_agg(p.queue_order), '{{}}')
            INTO got, orders
            FROM {schema}.pick_key_runs(env_name, queue_name, nullif(more_keys[i], ''),
                                        least(share, more_room[i], room), taken, only_tasks,
                                        1000) AS p;
            RETURN QUERY SELECT p.id, p.queue_order FROM unnest(got, orders) AS p(id, queue_order);
            taken := taken || got;
            room := room - cardinality(got);
            IF cardinality(got) > 0 AND more_room[i] > cardinality(got) THEN
                next_keys := next_keys || more_keys[i];
                next_room := next_room || (more_room[i] - cardinality(got));
            END IF;
        END LOOP;
        more_keys := next_keys;
        more_room := next_room;
    END LOOP;
END;
$$;
