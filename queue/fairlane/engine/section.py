"""The base of the engine's sections: a schema, and statements of ``sql/`` built for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fairlane.engine.sqlfiles import query
from fairlane.engine.statement import Row, Statement

T = TypeVar("T")


class Section:
    def __init__(self, schema: str) -> None:
        self.schema = schema

    def _statement(
        self,
        name: str,
        params: Mapping[str, Any] | None,
        row: Callable[[Row], T],
    ) -> Statement[T]:
        # By name, exactly the parameters the statement declares (its ``-- params:`` lines):
        # tests/sql/test_statements.py calls every method of every section and checks them.
        return Statement(name, query(name, self.schema), params, row)
