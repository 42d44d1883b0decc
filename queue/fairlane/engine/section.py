"""The base of the engine's sections: a schema, and statements of ``sql/`` built for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
        params: Mapping[str, Any] | Sequence[Any] | None,
        row: Callable[[Row], T],
    ) -> Statement[T]:
        # tests/sql/test_statements.py finds every name given here: a named statement of sql/
        # that no section builds is reported as unused.
        return Statement(name, query(name, self.schema), params, row)
