-- Concurrency keys: a queue's runs split by runs.concurrency_key, each key with its own copy
-- of the queue's concurrency_limit (keyless runs are one more key), and queues.total_limit
-- bounding the queue across them. pick_runs (sql/claim/pick.sql) hands a queue
-- here when it has queued runs with a key (a keyed queue); a queue without any is walked as
-- before, and keyless runs cost nothing more.
--
-- Slots per key are derived like every slot: the EXECUTING runs of the key (and WAITING ones
-- owed a resume), counted by pick_runs under the environment's row lock, which
-- every claim of the environment takes before it counts. So no two claims count a key at once,
-- and no count misses a committed claim: there is no per-key counter to leak or skew.
--
-- Fairness inside the queue is round robin over its keys, in key order from where the last
-- claim there stopped (queues.key_cursor, written under the same row lock): the first ring
-- takes one run of each key with room, in its queue order; the keyless runs come after the
-- last key. A ring that leaves room comes back to the keys that gave a run, which take turns
-- again, each an even share of what is left per turn. A key with 10,000 queued runs takes one
-- turn in the ring as a key with 10 does.
-- The ring reads runs_queued_key_idx in key order (ring_heads): a window of its entries, where
-- each key's first entry is its head, then one descent per key; a key at its limit is stepped
-- over, its runs never locked. The turns after it take every key's share in one statement
-- (fill_keys). The cursor is written when it moves.
--
-- Keyless runs stay out of the key index; their turn in a keyed queue reads
-- runs_queued_keyless_idx, the queued runs without a key in queue order, so it finds its first
-- one however many runs of keys waiting for a slot or a token are queued ahead of it.

-- function: pick_keyless_runs
-- Up to `n` claimable keyless runs of a keyed queue, in queue order, locked (FOR UPDATE SKIP
-- LOCKED), none of `taken`: a walk of runs_queued_keyless_idx from the queue's first entry. The
-- filters are pick_runs' (TTL, the claimer's tasks).
CREATE OR REPLACE FUNCTION {schema}.pick_keyless_runs(
    env_name text, queue_name text, n integer, taken bigint[], only_tasks text[])
RETURNS TABLE (id bigint, queue_order timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    IF n <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.id, r.queue_order FROM {schema}.runs r
    WHERE r.environment = env_name AND r.queue = queue_name
      AND r.status = 'QUEUED' AND r.concurrency_key IS NULL
      AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
      AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
      AND r.id <> ALL (taken)
    ORDER BY r.queue_order, r.id
    LIMIT n
    FOR UPDATE SKIP LOCKED;
END;
$$;

-- function: ring_heads
-- The first claimable run (in queue order, locked FOR UPDATE SKIP LOCKED) of each key of a
-- queue after `after` (and not past `upto`, when given), in key order, skipping the keys at
-- `key_limit` (`held`: slot holders per key, an object) and, with a rate, the keys whose bucket
-- holds no token (sql/claim/key_rates.sql); at most `n`. One statement. The keys
-- and their first runs come from runs_queued_key_idx in key order, then queue order: first a
-- window, the next `2n` entries in one range scan, where the first entry of each key is its
-- head; past a full window, a loose index scan, one descent per key to its first entry. Many
-- keys with a run or two cost an entry each, no descent; keys with many runs cost their
-- descents, and the window's `2n` entries on top (a descent costs as much as a dozen entries).
-- A key at its limit is stepped over, its runs never locked. Each head is locked by its tuple
-- id, the version the index led to in this statement's snapshot (the lock re-checks the status
-- and the filters, pick_runs', on the latest version); one that another transaction holds or
-- the filters leave out sends the lock on through the key's runs after it (the range of the
-- key index from the head to the key's end, as fill_keys walks it).
-- The ring's end (`bound`: `upto`, or the queue's last key, one descent from the end) bounds
-- both scans: as `upto IS NULL OR key <= upto` it would be a filter on a generic plan, and the
-- last step of the ring's second part would read every entry past `upto`. Sorts are off: only
-- runs_queued_key_idx gives the ring's order unsorted, and a runs table without statistics
-- (a fresh one, before its first analyze) otherwise led the planner to read the queue's whole
-- queued runs and sort them, for every scan of the ring; JIT is off, as a sort that cannot be
-- avoided is costed past jit_above_cost.
CREATE OR REPLACE FUNCTION {schema}.ring_heads(
    env_name text, queue_name text, after text, upto text, n integer, key_limit integer,
    held jsonb, only_tasks text[], rate_per_run_s double precision, rate_burst integer)
RETURNS TABLE (id bigint, queue_order timestamptz, concurrency_key text)
LANGUAGE plpgsql
SET enable_sort = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH RECURSIVE bound(key) AS (
        SELECT coalesce(upto, (
            SELECT r.concurrency_key FROM {schema}.runs r
            WHERE r.environment = env_name AND r.queue = queue_name AND r.status = 'QUEUED'
              AND r.concurrency_key IS NOT NULL
            ORDER BY r.concurrency_key DESC LIMIT 1))
    ), win AS (
        SELECT w.key, w.tid, w.queue_order, w.id,
               w.key IS DISTINCT FROM lag(w.key) OVER entries AS first,
               row_number() OVER entries AS nth
        FROM (SELECT r.concurrency_key AS key, r.ctid AS tid, r.queue_order, r.id
              FROM {schema}.runs r
              WHERE r.environment = env_name AND r.queue = queue_name AND r.status = 'QUEUED'
                AND r.concurrency_key > after AND r.concurrency_key <= (SELECT b.key FROM bound b)
              ORDER BY r.concurrency_key, r.queue_order, r.id
              LIMIT 2 * n) AS w
        WINDOW entries AS (ORDER BY w.key, w.queue_order, w.id)
    ), rest(key, tid, queue_order, id) AS (
        (SELECT r.concurrency_key, r.ctid, r.queue_order, r.id FROM {schema}.runs r
         WHERE r.environment = env_name AND r.queue = queue_name AND r.status = 'QUEUED'
           AND r.concurrency_key > (SELECT w.key FROM win w WHERE w.nth = 2 * n)
           AND r.concurrency_key <= (SELECT b.key FROM bound b)
         ORDER BY r.concurrency_key, r.queue_order, r.id
         LIMIT 1)
        UNION ALL
        SELECT next.key, next.tid, next.queue_order, next.id
        FROM rest
        CROSS JOIN LATERAL (
            SELECT r.concurrency_key AS key, r.ctid AS tid, r.queue_order, r.id
            FROM {schema}.runs r
            WHERE r.environment = env_name AND r.queue = queue_name AND r.status = 'QUEUED'
              AND r.concurrency_key > rest.key AND r.concurrency_key <= (SELECT b.key FROM bound b)
            ORDER BY r.concurrency_key, r.queue_order, r.id
            LIMIT 1) AS next
    ), ring AS (
        SELECT w.key, w.tid, w.queue_order, w.id FROM win w WHERE w.first
        UNION ALL
        SELECT rest.key, rest.tid, rest.queue_order, rest.id FROM rest
    ), open_keys AS MATERIALIZED (
        -- The keys with room and, with a rate, a token (sql/claim/key_rates.sql), read as the
        -- outer query asks for more (a CTE is read on demand), so that no head of a key
        -- without either is locked. The bucket is read in the statement: a function reading
        -- it would run once per key, as PostgreSQL never inlines one that holds a subquery.
        SELECT ring.key, ring.tid, ring.queue_order, ring.id
        FROM ring
        LEFT JOIN LATERAL (
            SELECT b.full_at FROM {schema}.rate_buckets b
            WHERE rate_per_run_s IS NOT NULL AND b.environment = env_name
              AND b.queue = queue_name AND b.concurrency_key = ring.key
            LIMIT 1) AS bucket ON true
        WHERE (key_limit IS NULL OR coalesce((held ->> ring.key)::integer, 0) < key_limit)
          AND {schema}.rate_tokens(bucket.full_at, statement_timestamp(), rate_per_run_s,
                                   rate_burst) > 0
    )
    SELECT head.id, head.queue_order, ring.key
    FROM open_keys AS ring
    CROSS JOIN LATERAL (
        SELECT known.id, known.queue_order FROM (
            SELECT r.id, r.queue_order FROM {schema}.runs r
            WHERE r.ctid = ring.tid AND r.status = 'QUEUED'
              AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
              AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
            FOR UPDATE SKIP LOCKED) AS known
        UNION ALL
        SELECT walk.id, walk.queue_order FROM (
            SELECT r.id, r.queue_order FROM {schema}.runs r
            WHERE r.environment = env_name AND r.queue = queue_name AND r.status = 'QUEUED'
              AND (r.concurrency_key, r.queue_order, r.id) > (ring.key, ring.queue_order, ring.id)
              AND r.concurrency_key <= ring.key
              AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
              AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
            ORDER BY r.concurrency_key, r.queue_order, r.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED) AS walk
        LIMIT 1) AS head
    LIMIT n;
END;
$$;

-- function: pick_from_keys
-- Up to `room` runs of a keyed queue, round robin over its keys from `cursor_key`
-- (queues.key_cursor, as the caller read it), each key within `key_limit` (NULL: none) less its
-- slot holders (`held`: by key, an object, NULL when no cap needed them counted;
-- `keyless_held` for its keyless runs), and with a rate within
-- its bucket's tokens (`keyless_tokens`: the keyless runs'). The caller holds the
-- environment's row lock. The ring: the keys after the cursor, the keyless runs, the keys up
-- to the cursor; the cursor moves to the last key that gave a run ('' : the keyless runs).
CREATE OR REPLACE FUNCTION {schema}.pick_from_keys(
    env_name text, queue_name text, key_limit integer, room integer, cursor_key text,
    held jsonb, keyless_held integer, only_tasks text[],
    rate_per_run_s double precision, rate_burst integer, keyless_tokens integer)
RETURNS TABLE (id bigint, queue_order timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    start text := coalesce(cursor_key, '');
    ids bigint[];
    orders timestamptz[];
    keys text[];
BEGIN
    -- The first ring: one run of each key with room.
    SELECT coalesce(array_agg(h.id), '{{}}'), coalesce(array_agg(h.queue_order), '{{}}'),
           coalesce(array_agg(h.concurrency_key), '{{}}')
    INTO ids, orders, keys
    FROM {schema}.ring_heads(env_name, queue_name, start, NULL, room, key_limit, held,
                             only_tasks, rate_per_run_s, rate_burst) AS h;
    IF cardinality(ids) < room AND coalesce(key_limit, 2147483647) > keyless_held
       AND keyless_tokens > 0 THEN
        SELECT ids || coalesce(array_agg(p.id), '{{}}'),
               orders || coalesce(array_agg(p.queue_order), '{{}}'),
               keys || array_fill(''::text, ARRAY[count(*)::integer])
        INTO ids, orders, keys
        FROM {schema}.pick_keyless_runs(env_name, queue_name, 1, '{{}}', only_tasks) AS p;
    END IF;
    IF cardinality(ids) < room AND start <> '' THEN
        SELECT ids || coalesce(array_agg(h.id), '{{}}'),
               orders || coalesce(array_agg(h.queue_order), '{{}}'),
               keys || coalesce(array_agg(h.concurrency_key), '{{}}')
        INTO ids, orders, keys
        FROM {schema}.ring_heads(env_name, queue_name, '', start, room - cardinality(ids),
                                 key_limit, held, only_tasks, rate_per_run_s, rate_burst) AS h;
    END IF;
    IF cardinality(ids) > 0 THEN
        UPDATE {schema}.queues q SET key_cursor = nullif(keys[cardinality(keys)], '')
        WHERE q.environment = env_name AND q.name = queue_name
          AND q.key_cursor IS DISTINCT FROM nullif(keys[cardinality(keys)], '');
    END IF;
    RETURN QUERY SELECT p.id, p.queue_order FROM unnest(ids, orders) AS p(id, queue_order);
    IF cardinality(ids) < room AND cardinality(ids) > 0
       AND coalesce(key_limit, 2147483647) > 1 THEN
        RETURN QUERY SELECT m.id, m.queue_order FROM {schema}.fill_keys(
            env_name, queue_name, key_limit, room - cardinality(ids), keys, ids, orders, held,
            keyless_held, only_tasks, rate_per_run_s, rate_burst) AS m;
    END IF;
END;
$$;

-- function: fill_keys
-- After a ring that left room: the keys that gave a run (`keys`, '' for the keyless runs; the
-- runs they gave: `heads`, `head_orders`) take turns again, each an even share of the room left
-- per turn, within its limit and its rate's tokens, until the room or their runs run out
-- (`held`: slot holders by key). A turn is one statement for every key: each key's runs after
-- the last it gave, a range of runs_queued_key_idx that starts there (a key's runs before it
-- were taken by this claim, or skipped as locked or filtered out). Sorts are off, as in ring_heads: the range's order, key
-- then queue order, is the key index's alone. A key that gave less than its share has no more
-- to give. Only a queue with fewer keys with room than a claim takes runs comes here.
CREATE OR REPLACE FUNCTION {schema}.fill_keys(
    env_name text, queue_name text, key_limit integer, room integer, keys text[],
    heads bigint[], head_orders timestamptz[], held jsonb, keyless_held integer,
    only_tasks text[], rate_per_run_s double precision, rate_burst integer)
RETURNS TABLE (id bigint, queue_order timestamptz)
LANGUAGE plpgsql
SET enable_sort = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    more_room integer[];
    share integer;
    ids bigint[];
    orders timestamptz[];
    keyless integer := array_position(keys, '');
    keyless_taken bigint[] := '{{}}';
    keyless_more integer;
    asked integer;
    got bigint[];
BEGIN
    -- Each key's room after the run it gave: its limit less its slot holders, and with a
    -- rate no more than its bucket's tokens (the run it gave is charged with the others).
    SELECT coalesce(array_agg(least(
               coalesce(key_limit, 2147483647) - CASE WHEN k.key = '' THEN keyless_held
                   ELSE coalesce((held ->> k.key)::integer, 0) END,
               CASE WHEN rate_per_run_s IS NULL THEN 2147483647
                    ELSE {schema}.key_rate_tokens(env_name, queue_name, k.key, rate_per_run_s,
                                                  rate_burst) END) - 1
               ORDER BY k.nth), '{{}}')
    INTO more_room
    FROM unnest(keys) WITH ORDINALITY AS k(key, nth);
    IF keyless IS NOT NULL THEN
        keyless_more := more_room[keyless];
        keyless_taken := ARRAY[heads[keyless]];
    END IF;
    WHILE room > 0 AND cardinality(keys) > 0 LOOP
        share := greatest(1, room / cardinality(keys));
        SELECT coalesce(array_agg(g.nth ORDER BY g.nth, g.queue_order, g.id), '{{}}'),
               coalesce(array_agg(g.id ORDER BY g.nth, g.queue_order, g.id), '{{}}'),
               coalesce(array_agg(g.queue_order ORDER BY g.nth, g.queue_order, g.id), '{{}}')
        INTO got, ids, orders
        FROM (SELECT k.nth, p.id, p.queue_order
              FROM unnest(keys, more_room, heads, head_orders) WITH ORDINALITY
                  AS k(key, more, after_id, after_order, nth)
              CROSS JOIN LATERAL (
                  SELECT r.id, r.queue_order FROM {schema}.runs r
                  WHERE r.environment = env_name AND r.queue = queue_name
                    AND r.status = 'QUEUED'
                    AND (r.concurrency_key, r.queue_order, r.id)
                        > (k.key, k.after_order, k.after_id)
                    AND r.concurrency_key <= k.key
                    AND (r.expires_at IS NULL OR r.expires_at > now() OR r.attempts > 0)
                    AND (only_tasks IS NULL OR r.task = ANY(only_tasks))
                  ORDER BY r.concurrency_key, r.queue_order, r.id
                  LIMIT least(share, k.more)
                  FOR UPDATE SKIP LOCKED) AS p
              WHERE k.key <> '' AND k.more > 0
              LIMIT room) AS g;
        -- The keys that gave their whole share and have room left go on to the next turn, from
        -- the last run each gave (in `ids`, its runs are together, in their order).
        SELECT coalesce(array_agg(keys[p.nth] ORDER BY p.nth), '{{}}'),
               coalesce(array_agg(more_room[p.nth] - p.n ORDER BY p.nth), '{{}}'),
               coalesce(array_agg(ids[p.last] ORDER BY p.nth), '{{}}'),
               coalesce(array_agg(orders[p.last] ORDER BY p.nth), '{{}}')
        INTO keys, more_room, heads, head_orders
        FROM (SELECT g.nth, count(*)::integer AS n, max(g.at)::integer AS last
              FROM unnest(got) WITH ORDINALITY AS g(nth, at)
              GROUP BY g.nth) AS p
        WHERE p.n = least(share, more_room[p.nth]) AND more_room[p.nth] > p.n;
        RETURN QUERY SELECT p.id, p.queue_order FROM unnest(ids, orders) AS p(id, queue_order);
        room := room - cardinality(ids);
        -- The keyless runs' turn comes after the keys', as in the ring.
        IF keyless_more > 0 AND room > 0 THEN
            asked := least(share, keyless_more, room);
            SELECT coalesce(array_agg(p.id), '{{}}'), coalesce(array_agg(p.queue_order), '{{}}')
            INTO ids, orders
            FROM {schema}.pick_keyless_runs(env_name, queue_name, asked, keyless_taken,
                                            only_tasks) AS p;
            RETURN QUERY SELECT p.id, p.queue_order FROM unnest(ids, orders) AS p(id, queue_order);
            room := room - cardinality(ids);
            keyless_taken := keyless_taken || ids;
            keyless_more := CASE WHEN cardinality(ids) = asked
                                 THEN keyless_more - cardinality(ids) ELSE 0 END;
            IF keyless_more > 0 THEN
                keys := keys || ''::text;
                more_room := more_room || keyless_more;
                heads := heads || NULL::bigint;
                head_orders := head_orders || NULL::timestamptz;
            END IF;
        END IF;
    END LOOP;
END;
$$;
