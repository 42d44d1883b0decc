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
    """A SQLAlchemy URL selecting the psycopg 3 driver, from a URL or a key=value DSN."""
    if re.match(r"^postgres(ql)?(\+\w+)?://", url):
        return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+psycopg://", url)
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy.engine import URL

    params = conninfo_to_dict(url)
    host = _str(params.get("host"))
    if host is not None and (host.startswith("/") or "," in host):
        # A Unix-socket folder (or several hosts) cannot sit in the URL's host part: psycopg
        # takes them, and the port that goes with them, as query parameters.
        host = None
    else:
        params.pop("host", None)
    port = params.pop("port", None) if host is not None else None
    built = URL.create(
        "postgresql+psycopg",
        username=_str(params.pop("user", None)),
        password=_str(params.pop("password", None)),
        host=host,
        port=int(str(port)) if port else None,
        database=_str(params.pop("dbname", None)),
        query={key: str(value) for key, value in params.items() if value is not None},
    )
    return built.render_as_string(hide_password=False)


def _str(value: object) -> str | None:
    return None if value is None else str(value)
