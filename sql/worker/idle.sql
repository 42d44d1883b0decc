-- A worker in burst mode (Worker.run_until_idle, `fairlane worker --burst`) stops once a claim
-- finds nothing, it holds no run, and nothing it serves is about to become claimable.

-- name: due_delayed_runs
-- params: environments text[], queues text[], tasks text[]
-- Whether DELAYED runs of these environments, queues and tasks (NULL: any) are due already (a
-- delay or a retry's backoff that has passed) and wait only for the promotion job to queue them.
SELECT EXISTS (
    SELECT 1 FROM {schema}.runs AS r
    WHERE r.status = 'DELAYED' AND r.available_at <= now()
      AND (%(environments)s::text[] IS NULL OR r.environment = ANY(%(environments)s::text[]))
      AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[]))
      AND (%(tasks)s::text[] IS NULL OR r.task = ANY(%(tasks)s::text[]))
) AS due;

-- name: advance_delayed_runs
-- params: environments text[], queues text[]
-- For tests (fairlane_worker.drain(include_delayed=True)): every DELAYED run of these
-- environments and queues (NULL: any) becomes due now, as if its delay or its retry's backoff
-- had passed; the promotion job then queues it. Returns how many were advanced.
WITH advanced AS (
    UPDATE {schema}.runs AS r
    SET available_at = now()
    WHERE r.status = 'DELAYED' AND r.available_at > now()
      AND (%(environments)s::text[] IS NULL OR r.environment = ANY(%(environments)s::text[]))
      AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[]))
    RETURNING 1
)
SELECT count(*)::integer AS advanced FROM advanced;
