-- The web server's signing secrets, made on first use and shared by every server process.

-- name: ensure_web_secret
-- params: name text, candidate bytea
-- The secret named `name`: the stored one, or `candidate` if none was stored yet (two
-- processes racing store one, and both read it back).
WITH made AS (
    INSERT INTO {schema}.web_secrets (name, secret)
    VALUES (%(name)s, %(candidate)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING secret
)
SELECT secret FROM made
UNION ALL
SELECT secret FROM {schema}.web_secrets WHERE name = %(name)s AND NOT EXISTS (SELECT FROM made);
