"""Alembic environment: fairlane's tables in their own schema, with their own version table."""

from __future__ import annotations

from alembic import context
from psycopg import sql
from sqlalchemy import create_engine, pool

from fairlane.config import database_url, schema_name, sqlalchemy_url
from fairlane.schema import VERSION_TABLE, build_metadata
from fairlane.schema.migrate import SCHEMA_ATTRIBUTE, URL_ATTRIBUTE

config = context.config
schema = schema_name(config.attributes.get(SCHEMA_ATTRIBUTE))
config.attributes[SCHEMA_ATTRIBUTE] = schema
url = sqlalchemy_url(config.attributes.get(URL_ATTRIBUTE) or database_url())


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    # Only fairlane's own schema: the application's tables are not ours to compare.
    if type_ == "schema":
        return name == schema
    return True


def run_migrations() -> None:
    connectable = config.attributes.get("connection")
    if connectable is None:
        engine = create_engine(url, poolclass=pool.NullPool)
        with engine.connect() as connection:
            _run(connection)
        engine.dispose()
    else:
        _run(connectable)


def _run(connection: object) -> None:
    from sqlalchemy.engine import Connection

    assert isinstance(connection, Connection)
    create_schema = sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
    connection.exec_driver_sql(create_schema.as_string(None))
    connection.commit()
    context.configure(
        connection=connection,
        target_metadata=build_metadata(schema),
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        include_schemas=True,
        include_name=include_name,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
