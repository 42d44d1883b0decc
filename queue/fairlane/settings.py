"""Where fairlane finds its database and schema.

``DATABASE_URL`` names the server; without it fairlane uses the local server's default address
and its own database, ``fairlane``. ``FAIRLANE_SCHEMA`` names the PostgreSQL schema that holds
fairlane's tables (default ``fairlane``), so it can share a database with an application.
"""

from __future__ import annotations

import os
import re

DEFAULT_DATABASE_URL = "postgresql://127.0.0.1:5432/fairlane"
DEFAULT_SCHEMA = "fairlane"

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def database_url(explicit: str | None = None) -> str:
    """The DSN to use: an explicit one, else ``DATABASE_URL``, else the local default."""
    return explicit or os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL


def schema_name(explicit: str | None = None) -> str:
    """The schema to use, validated so that it stays a plain lowercase identifier."""
    name = explicit or os.environ.get("FAIRLANE_SCHEMA") or DEFAULT_SCHEMA
    if not _SCHEMA_NAME.match(name):
        from fairlane.errors import ConfigurationError

        raise ConfigurationError(
            f"schema name {name!r} must be lowercase letters, digits and underscores"
        )
    return name


def psycopg_dsn(url: str) -> str:
    """A DSN psycopg accepts: SQLAlchemy's ``postgresql+psycopg://`` prefix is dropped."""
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def sqlalchemy_url(url: str) -> str:
    """A SQLAlchemy URL that selects the psycopg 3 driver."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+psycopg://", url)
