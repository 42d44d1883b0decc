"""Property-based: requests generated from the served OpenAPI document, within its ranges and
around them (schemathesis' positive and negative modes), sent to a real server with a real
admin key; none may answer 5xx. Bounded and derandomized, so a run is repeatable."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("schemathesis")

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.schemas import APIOperation

from fairlane.web import create_app
from fairlane.web.api.openapi import document
from fairlane.web.keys import create_key
from fairlane.web.realtime.settings import StreamSettings
from tests.helpers.browser import live_server

pytestmark = pytest.mark.slow
Operation = APIOperation[Any, Any, Any, Any]

# Examples per operation and mode: 30 operations x 2 modes x this, about a minute in all.
EXAMPLES = 25
# One test per tag of the document, each well inside the tests' time limit; "meta" is the
# document itself, which schemathesis leaves out of what it tests.
TAGS = sorted(
    {tag for path in document()["paths"].values() for op in path.values() for tag in op["tags"]}
    - {"meta"}
)


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    """The batch items body: a generated string as it is; anything else (negative mode) as
    its JSON text."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.encode("utf-8", "surrogatepass")


@pytest.fixture
def served(dsn: str, db: psycopg.Connection[Any]) -> Iterator[tuple[str, str]]:
    """The base URL of a real server over the test's database, and an admin key."""
    key = create_key(db, None, admin=True, name="fuzz")[1]
    # Event streams end at once, so that a request the fuzzer sends to one returns.
    streams = StreamSettings(heartbeat_s=0.05, lifetime_s=0.1)
    with live_server(create_app(dsn, "fairlane", pool_size=4, streams=streams)) as url:
        yield url, key


def _no_5xx(operation: Operation, mode: GenerationMode, session: requests.Session) -> None:
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: Case[Operation]) -> None:
        response = case.call(session=session)
        case.validate_response(response, checks=[not_a_server_error])

    check()


@pytest.mark.parametrize("tag", TAGS)
def test_no_request_the_document_describes_answers_5xx(served: tuple[str, str], tag: str) -> None:
    url, key = served
    schema = schemathesis.openapi.from_url(f"{url}/api/v1/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    tagged = [operation for operation in operations if tag in operation.definition.raw["tags"]]
    assert tagged, tag
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {key}"
        for operation in tagged:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _no_5xx(operation, mode, session)
