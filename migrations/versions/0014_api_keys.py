"""The HTTP API (fairlane.web): API keys, the web server's secrets, and the environment of
tokens made through the API.

``api_keys`` holds one row per key: its kind (``environment``, confined to one environment,
or ``admin``, for the dashboard and every environment), the SHA-256 of the key (never the key
itself) and a short prefix to tell keys apart. ``web_secrets`` holds the random secrets the
web server signs with (token callback URLs, dashboard sessions, CSRF tokens), so that every
server process of one database signs alike. ``waitpoints.environment`` records which
environment made a token through the API (NULL for tokens made by the library).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import schema as migration_schema

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    tz = sa.DateTime(timezone=True)
    op.create_table(
        "api_keys",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("environment", sa.Text),
        sa.Column("name", sa.Text),
        sa.Column("prefix", sa.Text, nullable=False),
        sa.Column("secret_hash", sa.Text, nullable=False),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        sa.Column("last_used_at", tz),
        sa.Column("revoked_at", tz),
        sa.CheckConstraint("kind IN ('environment', 'admin')", name="api_keys_kind_check"),
        sa.CheckConstraint(
            "(kind = 'admin') = (environment IS NULL)", name="api_keys_environment_check"
        ),
        schema=schema,
    )
    op.create_index(
        "api_keys_secret_hash_idx", "api_keys", ["secret_hash"], unique=True, schema=schema
    )
    op.create_table(
        "web_secrets",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("secret", sa.LargeBinary, nullable=False),
        sa.Column("created_at", tz, nullable=False, server_default=sa.text("now()")),
        schema=schema,
    )
    op.add_column("waitpoints", sa.Column("environment", sa.Text), schema=schema)


def downgrade() -> None:
    schema = migration_schema()
    op.drop_column("waitpoints", "environment", schema=schema)
    op.drop_table("web_secrets", schema=schema)
    op.drop_index("api_keys_secret_hash_idx", table_name="api_keys", schema=schema)
    op.drop_table("api_keys", schema=schema)
