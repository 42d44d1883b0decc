"""A statement of ``sql/`` with its parameters and the type of its rows, and the functions that
run one on a psycopg connection, sync or async.

The engine's methods build statements and never touch a connection, so the same method serves
``Client`` and ``AsyncClient``, a worker's loops and the CLI. Rows are read by column name into
the statement's type (``row``), never unpacked by a position written in the code; row types of
statements with many rows (``ByPosition``) find the positions from the names once per
statement.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Generic, LiteralString, TypeVar

import psycopg
from psycopg.pq import ExecStatus
from psycopg.rows import BaseRowFactory

T = TypeVar("T")
Row = Mapping[str, Any]
Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class Statement(Generic[T]):
    name: str
    sql: LiteralString
    params: Mapping[str, Any] | Sequence[Any] | None
    row: Callable[[Row], T]


def no_rows(row: Row) -> None:
    """For statements whose rows, if any, nobody reads."""


class ByPosition(ABC, Generic[T]):
    """A row type that reads a row's values by position, the positions found from the column
    names once per statement (``reader``), so that no dict is made per row; called with a row
    as a mapping, it reads the same."""

    __slots__ = ()

    @abstractmethod
    def __call__(self, row: Row) -> T: ...

    @abstractmethod
    def reader(self, names: Sequence[str]) -> Callable[[Sequence[Any]], T]: ...


class _Scalar(ByPosition[Any]):
    """The single column of a row (the ids an outcome's fence accepted: one row per run)."""

    __slots__ = ()

    def __call__(self, row: Row) -> Any:
        (value,) = row.values()
        return value

    def reader(self, names: Sequence[str]) -> Callable[[Sequence[Any]], Any]:
        if len(names) != 1:
            raise ValueError(f"a scalar statement returned {len(names)} columns")
        return itemgetter(0)


scalar = _Scalar()


@dataclass(frozen=True, slots=True)
class ByColumns(ByPosition[T]):
    """A row type for statements of many rows (a claim of hundreds): ``build`` takes the values
    of ``columns`` in that order. The columns are still found by name, once per statement, and
    no dict is made per row: a claim builds its rows by the thousand, and the dict was a good
    part of each
    (bench/sittings/04-the-worker-s-python-per-run-binary-arrays-claims-of-1-000.md)."""

    columns: tuple[str, ...]
    build: Callable[..., T]

    def __call__(self, row: Row) -> T:
        return self.build(*(row[name] for name in self.columns))

    def reader(self, names: Sequence[str]) -> Callable[[Sequence[Any]], T]:
        missing = [name for name in self.columns if name not in names]
        if missing:
            raise LookupError(f"the statement returned no column {', '.join(missing)}")
        build = self.build
        if len(self.columns) == 1:
            position = names.index(self.columns[0])
            return lambda values: build(values[position])
        pick = itemgetter(*(names.index(name) for name in self.columns))
        return lambda values: build(*pick(values))


# Results that carry rows (a statement without RETURNING gives COMMAND_OK).
_ROWS = (ExecStatus.TUPLES_OK, ExecStatus.SINGLE_TUPLE)


def _returns_rows(cursor: Any) -> bool:
    result = cursor.pgresult
    return result is not None and result.status in _ROWS


def _column_names(cursor: Any) -> list[str]:
    """The result's column names, read from the result itself: psycopg's ``description`` makes
    a ``Column`` per column on every access, with its type looked up (a trigger's eight columns
    cost more than its rows). Names are decoded as UTF-8: every client encoding PostgreSQL
    offers writes the ASCII names of fairlane's statements as ASCII."""
    if not _returns_rows(cursor):
        return []
    result = cursor.pgresult
    return [(result.fname(i) or b"").decode() for i in range(result.nfields)]


def _factory(make: Callable[[Row], T]) -> BaseRowFactory[T]:
    def factory(cursor: Any) -> Callable[[Sequence[Any]], T]:
        names = _column_names(cursor)
        if isinstance(make, ByPosition):
            return make.reader(names)
        return lambda values: make(dict(zip(names, values, strict=True)))

    return factory


# -- operations: several statements, driven on a sync or an async connection ----------------

# An operation yields the statements it needs one at a time and is sent back each one's rows;
# what it returns is its result. The same operation serves sync and async callers.
Operation = Generator[Statement[Any], list[Any], T]


# -- async, written once: the sync section below is generated from it ----------------------


async def rows_async(conn: AsyncConn, statement: Statement[T]) -> list[T]:
    """Every row; none for a statement that returns no rows (an INSERT without RETURNING)."""
    async with conn.cursor(row_factory=_factory(statement.row)) as cursor:
        await cursor.execute(statement.sql, statement.params)
        return await cursor.fetchall() if _returns_rows(cursor) else []


async def first_async(conn: AsyncConn, statement: Statement[T]) -> T | None:
    async with conn.cursor(row_factory=_factory(statement.row)) as cursor:
        await cursor.execute(statement.sql, statement.params)
        return await cursor.fetchone()


async def one_async(conn: AsyncConn, statement: Statement[T]) -> T:
    """The row of a statement that always returns one (a function call, an aggregate)."""
    found = await first_async(conn, statement)
    if found is None:
        raise LookupError(f"statement {statement.name} returned no row")
    return found


async def run_async(conn: AsyncConn, statement: Statement[Any]) -> None:
    await conn.execute(statement.sql, statement.params)


async def drive_async(conn: AsyncConn, operation: Operation[T]) -> T:
    try:
        statement = next(operation)
        while True:
            statement = operation.send(await rows_async(conn, statement))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def rows(conn: Conn, statement: Statement[T]) -> list[T]:
    """Every row; none for a statement that returns no rows (an INSERT without RETURNING)."""
    with conn.cursor(row_factory=_factory(statement.row)) as cursor:
        cursor.execute(statement.sql, statement.params)
        return cursor.fetchall() if _returns_rows(cursor) else []


def first(conn: Conn, statement: Statement[T]) -> T | None:
    with conn.cursor(row_factory=_factory(statement.row)) as cursor:
        cursor.execute(statement.sql, statement.params)
        return cursor.fetchone()


def one(conn: Conn, statement: Statement[T]) -> T:
    """The row of a statement that always returns one (a function call, an aggregate)."""
    found = first(conn, statement)
    if found is None:
        raise LookupError(f"statement {statement.name} returned no row")
    return found


def run(conn: Conn, statement: Statement[Any]) -> None:
    conn.execute(statement.sql, statement.params)


def drive(conn: Conn, operation: Operation[T]) -> T:
    try:
        statement = next(operation)
        while True:
            statement = operation.send(rows(conn, statement))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


# -- end of the generated sync section -------------------------------------------------------
