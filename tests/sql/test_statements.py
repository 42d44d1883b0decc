"""Every named statement of sql/ declares its parameters (``-- params:``), is PREPAREd against a
migrated database with the types it declares, and is built by a method of the engine
(fairlane/engine/) that passes exactly those parameters: a statement nothing uses, a renamed
placeholder or a parameter a method forgets fails here, not at run time."""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints
from uuid import UUID, uuid4

import psycopg
import pytest

import fairlane.engine
from fairlane.engine import Engine
from fairlane.engine.section import Section
from fairlane.engine.sqlfiles import query, statement_names, statement_params
from fairlane.engine.statement import Statement

# ``%(name)s``, and ``%(name)b`` for a parameter sent in binary.
_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]")
# Utility commands cannot be PREPAREd; these are run instead (each is harmless on a fresh
# database: LISTEN, and the periodic-job runner with nothing due that matters).
_RUN_INSTEAD = {
    "listen_channel",
    "listen_cancel_channel",
    "listen_resume_channel",
    "listen_finished_channel",
    "listen_changes_channel",
}
_PROCEDURE_CALLS = {"run_due_periodic_jobs"}
_SAMPLES: dict[Any, Any] = {
    int: 1,
    float: 1.5,
    str: "x",
    bool: True,
    bytes: b"x",
    UUID: uuid4(),
    datetime: datetime(2024, 1, 1, tzinfo=UTC),
}


def _placeholders(sql: str) -> list[str]:
    """The statement's placeholder names, in the order it first uses them."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(sql)))


def _numbered(sql: str) -> str:
    """``%(name)s`` and ``%(name)b`` placeholders as ``$n``, the same name the same number."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    return _PLACEHOLDER.sub(number, sql).replace("%%", "%")


def _sample(hint: Any) -> Any:
    """A value of the type ``hint``: what an engine method is called with here."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return None
    if origin in (Union, types.UnionType):
        return _sample(next(arg for arg in args if arg is not type(None)))
    if origin in (list, Sequence):
        return [_sample(args[0])]
    if origin is tuple:
        return tuple(_sample(arg) for arg in args)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        fields = get_type_hints(hint)
        return hint(
            **{field.name: _sample(fields[field.name]) for field in dataclasses.fields(hint)}
        )
    return _SAMPLES[hint]


def _engine_methods() -> dict[str, Callable[..., Any]]:
    """Every statement-building method of every section of an engine, bound, by its path
    (``claim.runs``)."""
    sections = Engine("fairlane")
    methods: dict[str, Callable[..., Any]] = {}
    for attribute, section in vars(sections).items():
        if not isinstance(section, Section):
            continue
        for name, _ in inspect.getmembers(type(section), inspect.isfunction):
            if not name.startswith("_") and name not in vars(Section):
                methods[f"{attribute}.{name}"] = getattr(section, name)
    return methods


def _untyped(hint: Any) -> bool:
    """Whether ``hint`` lets any key through: a dict or mapping of parameters."""
    if get_origin(hint) in (Union, types.UnionType):
        return any(_untyped(arg) for arg in get_args(hint))
    return hint in (dict, Mapping) or get_origin(hint) in (dict, Mapping)


def _built(method: Callable[..., Any]) -> Statement[Any]:
    hints = get_type_hints(method)
    signature = inspect.signature(method)
    arguments = {name: _sample(hints[name]) for name in signature.parameters}
    statement = method(**arguments)
    assert isinstance(statement, Statement)
    return statement


@pytest.mark.parametrize("name", statement_names())
def test_declared_params_are_the_placeholders(name: str) -> None:
    declared = [param.name for param in statement_params(name)]
    assert declared == _placeholders(query(name, "fairlane"))


@pytest.mark.parametrize("method", sorted(_engine_methods()))
def test_engine_method_passes_exactly_the_declared_params(method: str) -> None:
    function = _engine_methods()[method]
    hints = get_type_hints(function)
    untyped = [name for name in inspect.signature(function).parameters if _untyped(hints[name])]
    assert untyped == [], f"{method} takes a mapping of parameters"
    statement = _built(function)
    passed = statement.params or {}
    assert isinstance(passed, Mapping), f"{method} passes its parameters by position"
    declared = {param.name for param in statement_params(statement.name)}
    assert set(passed) == declared, f"{method} builds {statement.name}"


def test_every_statement_is_built_by_the_engine() -> None:
    built = {_built(function).name for function in _engine_methods().values()}
    assert set(statement_names()) - built == set(), "named statements no engine method builds"


def test_nothing_outside_the_engine_reads_sql_files() -> None:
    root = Path(fairlane.engine.__file__).parent.parent
    readers = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "sqlfiles" in path.read_text() and path.parent.name != "engine"
    ]
    assert readers == []


@pytest.mark.parametrize("name", statement_names())
def test_statement_prepares_with_its_declared_types(name: str, db: psycopg.Connection[Any]) -> None:
    sql = query(name, "fairlane")
    if name in _RUN_INSTEAD:
        db.execute(sql)
        return
    if name in _PROCEDURE_CALLS:
        db.autocommit = True
        db.execute(sql)
        return
    db.execute(f"PREPARE probe AS {_numbered(sql).rstrip().rstrip(';')}")
    row = db.execute(
        "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = 'probe'"
    ).fetchone()
    assert row is not None
    assert row[0] == [param.type for param in statement_params(name)]
