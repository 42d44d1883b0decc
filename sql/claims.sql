-- name: claim_runs
-- Claim up to %(limit)s runs in one statement: fairly across environments, within every cap,
-- each with a fresh lease token that all later writes must present (sql/scheduling.sql). The
-- attempt is counted here, so a redelivery after a lapsed lease counts as one too.
-- %(full_scan)s: look for environments that gained work before serving the known ones.
SELECT id, lease_token, task, payload, attempts, max_attempts, environment, queue, metadata,
       machine, max_duration_s
FROM {schema}.claim_runs(%(limit)s, %(lease_s)s, %(worker_id)s,
                         %(environments)s::text[], %(queues)s::text[], %(full_scan)s);
