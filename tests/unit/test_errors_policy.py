"""Every error has one category, and the CLI's exit code and the HTTP API's status of an error
are both its category's, read from one table (fairlane.errors_policy)."""

from __future__ import annotations

import ast
import json
import pkgutil
from importlib import import_module
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import fairlane
from fairlane import errors as e
from fairlane.cli.main import _refused
from fairlane.errors_policy import POLICIES, UNCLASSIFIED, category, exit_code, http_status
from fairlane.web.errors import fairlane_error, handle_fairlane_error

# Bases that group errors by domain rather than by kind; never raised themselves.
DOMAIN_BASES = {e.BatchError}


def _fairlane_error_classes() -> list[type[e.FairlaneError]]:
    # Every module loaded, so that subclasses defined outside errors.py are seen too.
    for module in pkgutil.walk_packages(fairlane.__path__, "fairlane."):
        if not module.name.endswith("__main__"):
            import_module(module.name)
    found, pending = [], [e.FairlaneError]
    while pending:
        for sub in pending.pop().__subclasses__():
            found.append(sub)
            pending.append(sub)
    return [kind for kind in found if kind.__module__.startswith("fairlane.")]


CLASSES = _fairlane_error_classes()
CLASSIFIED = [k for k in CLASSES if k not in set(e.CATEGORIES) | DOMAIN_BASES]


def _blank(kind: type[e.FairlaneError]) -> e.FairlaneError:
    """An instance without its constructor's arguments: the policy reads only its type."""
    error = kind.__new__(kind)
    error.args = (f"a {kind.__name__}",)
    for name in ("status", "retry_after_s"):
        setattr(error, name, None)
    return error


def test_the_table_covers_every_category_and_nothing_else() -> None:
    assert set(POLICIES) == set(e.CATEGORIES)
    assert len(CLASSIFIED) > 40


@pytest.mark.parametrize("kind", CLASSIFIED, ids=lambda kind: kind.__name__)
def test_every_error_has_exactly_one_category(kind: type[e.FairlaneError]) -> None:
    categories = [base for base in e.CATEGORIES if issubclass(kind, base)]
    assert len(categories) == 1, f"{kind.__name__}: {[c.__name__ for c in categories]}"
    assert category(kind) is categories[0]


@pytest.mark.parametrize("kind", CLASSIFIED, ids=lambda kind: kind.__name__)
def test_cli_and_http_answer_the_category_s_row(
    kind: type[e.FairlaneError], capsys: pytest.CaptureFixture[str]
) -> None:
    row = POLICIES[categories_of(kind)]
    error = _blank(kind)
    # What the command does with an error it ended with: one line, then its exit code.
    assert _refused(error, verbose=False) == row.exit_code
    assert capsys.readouterr().err == f"error: a {kind.__name__}\n"
    assert exit_code(error) == row.exit_code
    assert http_status(error) == row.http_status
    assert fairlane_error(error).status_code == row.http_status


def categories_of(kind: type[e.FairlaneError]) -> type[e.FairlaneError]:
    found = category(kind)
    assert found is not None
    return found


def test_domain_bases_have_no_category_but_each_of_their_errors_has_one() -> None:
    for base in DOMAIN_BASES:
        assert category(base) is None
        assert all(
            category(kind) is not None
            for kind in CLASSES
            if issubclass(kind, base) and kind is not base
        )


def test_errors_of_no_category_are_faults() -> None:
    assert exit_code(e.FairlaneError("bare")) == UNCLASSIFIED.exit_code == 1
    assert http_status(e.FairlaneError("bare")) == UNCLASSIFIED.http_status == 500
    # Anything else a command ends with (an OSError, a psycopg error) is operational.
    assert exit_code(OSError("disk full")) == 1


@pytest.mark.parametrize(
    ("error", "exit", "status"),
    [
        # The two lists that this table replaced disagreed on these.
        (e.ScheduleNotFoundError("default", "nightly"), 3, 404),
        (e.UnknownMaintenanceItemError("setting", "nope"), 3, 404),
        (e.BatchAbortedError(7), 2, 409),
        (e.RunFilterError("status", "SLEEPING", "unknown"), 2, 422),
        (e.UnknownTaskError("t"), 2, 422),
        (e.BatchTransactionError(7), 2, 422),
        (e.SchemaObjectError("f", "defined twice"), 4, 503),
        (e.DatabaseUnavailable("no connection"), 1, 503),
        # And agreed on these, which stay as they were.
        (e.RunNotFoundError(1), 3, 404),
        (e.RunNotDelayedError(1, "QUEUED"), 2, 409),
        (e.TriggerOptionError("priority", "x", "not an integer"), 2, 422),
        (e.SettingError("prune_batch_size", 0, "out of range"), 2, 422),
        (e.QueueSizeLimitExceeded("a", "q", 1, scope="queue", size=2, index=0), 1, 429),
        (e.BatchRateLimitedError("a", 5, 1.5), 1, 429),
        (e.BatchStreamIdleError(7, 30, accepted=1, received=1, index=1), 1, 408),
        (e.SchemaMismatchError(None, "0021"), 4, 503),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_known_errors(error: e.FairlaneError, exit: int, status: int) -> None:
    assert (exit_code(error), http_status(error)) == (exit, status)


async def _raise_unavailable(request: Request) -> Response:
    raise e.DatabaseUnavailable("database unavailable: connection to 10.0.0.5 port 5432 failed")


@pytest.mark.anyio
async def test_an_unavailable_database_is_a_503_that_names_no_server() -> None:
    app = Starlette(
        routes=[Route("/api/v1/x", _raise_unavailable)],
        exception_handlers={e.FairlaneError: handle_fairlane_error},
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.get("/api/v1/x")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    body = json.loads(answer.text)
    assert body["error"]["type"] == "DatabaseUnavailable"
    assert "10.0.0.5" not in answer.text


def test_no_code_raises_the_uncategorised_base() -> None:
    """A bare ``FairlaneError`` has no category, so its exit code and HTTP status would be the
    fallback's: every raise names a categorised class."""
    offenders = []
    for path in Path(fairlane.__path__[0]).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                called = node.exc.func
                if isinstance(called, ast.Name) and called.id == "FairlaneError":
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
