-- Idempotency keys live on the runs they made: `idempotency_key` is unique per (environment,
-- task) while set (a partial unique index), so two triggers can never both make a run for one
-- key: the second INSERT ... ON CONFLICT waits for the first to commit, then finds its run.
-- Freeing a key moves it to `inactive_idempotency_key`, out of the index, keeping it readable.

-- function: find_idempotent_run
-- The run holding an active key, or NULL. A key whose run ended FAILED, CRASHED, TIMED_OUT,
-- EXPIRED or SYSTEM_FAILURE, or whose expiry passed, is freed on the way, so the caller makes
-- a new run (CANCELED and COMPLETED runs keep their key). The freeing UPDATE re-checks its
-- condition on the latest row version: of two triggers freeing one key, one frees it and the
-- other finds the key gone and looks again, finding the first one's new run or none yet.
CREATE OR REPLACE FUNCTION {schema}.find_idempotent_run(env text, task_name text, key text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    holder record;
BEGIN
    LOOP
        SELECT r.id, r.status, r.idempotency_key_expires_at AS expires_at
        INTO holder
        FROM {schema}.runs r
        WHERE r.environment = env AND r.task = task_name AND r.idempotency_key = key;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        IF NOT holder.status = ANY({schema}.failed_statuses())
           AND (holder.expires_at IS NULL OR holder.expires_at > now()) THEN
            RETURN holder.id;
        END IF;
        UPDATE {schema}.runs r
        SET inactive_idempotency_key = r.idempotency_key,
            idempotency_key = NULL
        WHERE r.id = holder.id
          AND r.idempotency_key = key
          AND (r.status = ANY({schema}.failed_statuses())
               OR r.idempotency_key_expires_at <= now());
    END LOOP;
END;
$$;
