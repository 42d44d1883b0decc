"""Input the database would refuse or fail on is refused before anything is sent.

Names, keys, tags and JSON nesting have documented limits (docs/trigger-options.md, "Limits").
A value past them raises ``TriggerOptionError`` or ``PayloadError`` carrying the request's
index; nothing is written, and the caller's transaction stays usable. Values at the limits,
in four-byte characters, fit every index they go into.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import fairlane
from fairlane import AsyncClient, Debounce, TriggerRequest
from fairlane.cli import main
from fairlane.errors import PayloadError, TriggerOptionError
from fairlane.payload import MAX_JSON_DEPTH
from fairlane.triggering.checks import (
    MAX_DEBOUNCE_KEY_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TAG_LENGTH,
    MAX_TAGS,
)
from tests.helpers import run_row

WIDE = "\N{GRINNING FACE}"  # four bytes in UTF-8: the widest a character gets in an index


def nested(depth: int) -> Any:
    """``depth`` levels of arrays and objects, alternating, around one number."""
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"n": value}
    return value


def run_count(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert row is not None
    return int(row[0])


REFUSED_OPTIONS = [
    pytest.param({"environment": "e" * 10_000}, "environment", id="environment-10000"),
    pytest.param({"queue": "q" * 10_000}, "queue", id="queue-10000"),
    pytest.param({"environment": "e" * (MAX_NAME_LENGTH + 1)}, "environment", id="environment-129"),
    pytest.param({"queue": "q" * (MAX_NAME_LENGTH + 1)}, "queue", id="queue-129"),
    pytest.param({"machine": "m" * (MAX_NAME_LENGTH + 1)}, "machine", id="machine-129"),
    pytest.param({"machine": ""}, "machine", id="machine-empty"),
    pytest.param({"tags": ["t"] * (MAX_TAGS + 1)}, "tags", id="eleven-tags"),
    pytest.param({"tags": ["t" * (MAX_TAG_LENGTH + 1)]}, "tags", id="tag-129"),
    pytest.param({"tags": [""]}, "tags", id="tag-empty"),
    pytest.param({"tags": [1]}, "tags", id="tag-not-a-string"),
    pytest.param({"debounce": Debounce("d" * 1_000_000, "5s")}, "debounce.key", id="debounce-1mb"),
    pytest.param(
        {"debounce": Debounce("d" * (MAX_DEBOUNCE_KEY_LENGTH + 1), "5s")},
        "debounce.key",
        id="debounce-257",
    ),
    pytest.param({"priority": True}, "priority", id="priority-true"),
    pytest.param({"priority": 1.5}, "priority", id="priority-float"),
    pytest.param({"max_attempts": True}, "max_attempts", id="max_attempts-true"),
    pytest.param({"metadata": "abc"}, "metadata", id="metadata-string"),
    pytest.param({"metadata": ["a", "b"]}, "metadata", id="metadata-list"),
    pytest.param({"idempotency_key": ""}, "idempotency_key", id="idempotency-key-empty"),
    pytest.param({"parent_run_id": True}, "parent_run_id", id="parent-true"),
]


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
@pytest.mark.parametrize(("options", "option"), REFUSED_OPTIONS)
def test_a_bad_item_raises_with_its_index_and_nothing_is_written(
    dsn: str, db: psycopg.Connection[Any], options: dict[str, Any], option: str, keyed: bool
) -> None:
    key: dict[str, Any] = {"idempotency_key": "k"} if keyed else {}
    requests = [TriggerRequest("send", n, **key) for n in range(4)]
    requests[2] = TriggerRequest("send", 2, **{**key, **options})
    with psycopg.connect(dsn) as conn:
        before = fairlane.trigger(conn, "send", "before")
        with pytest.raises(TriggerOptionError) as refused:
            fairlane.trigger_many(conn, requests)
        assert (refused.value.option, refused.value.index) == (option, 2)
        assert len(str(refused.value)) < 400, "the message must not carry a huge value whole"
        # Nothing reached the server: the caller's transaction goes on.
        assert conn.info.transaction_status is TransactionStatus.INTRANS
        after = fairlane.trigger(conn, "send", "after")
        conn.commit()
    assert sorted(row[0] for row in db.execute("SELECT id FROM fairlane.runs")) == [before, after]


@pytest.mark.parametrize("what", ["payload", "metadata"])
def test_json_nested_too_deep_is_a_payload_error(
    dsn: str, db: psycopg.Connection[Any], what: str
) -> None:
    for depth in (MAX_JSON_DEPTH + 1, 10_000):
        value = {"deep": nested(depth - 1)} if what == "metadata" else nested(depth)
        requests = [TriggerRequest("send", n) for n in range(3)]
        given: dict[str, Any] = {what: value}
        requests[1] = TriggerRequest("send", **given)
        with psycopg.connect(dsn) as conn:
            with pytest.raises(PayloadError, match=f"{what} nests") as refused:
                fairlane.trigger_many(conn, requests)
            assert refused.value.index == 1
            assert conn.info.transaction_status is TransactionStatus.IDLE
    assert run_count(db) == 0


@pytest.mark.anyio
async def test_values_at_the_limits_fit_every_index(dsn: str, db: psycopg.Connection[Any]) -> None:
    """Longest names and debounce key in four-byte characters, the most tags, the deepest
    JSON: accepted, stored as given, and a second trigger finds the debounced run."""
    name = WIDE * MAX_NAME_LENGTH
    options: dict[str, Any] = {
        "environment": name,
        "queue": name,
        "machine": name,
        "tags": [WIDE * MAX_TAG_LENGTH] * MAX_TAGS,
        "metadata": {"m": nested(MAX_JSON_DEPTH - 1)},
        "debounce": Debounce(WIDE * MAX_DEBOUNCE_KEY_LENGTH, "1m"),
    }
    payload = nested(MAX_JSON_DEPTH)
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger(name, payload, **options)
        assert await client.trigger(name, payload, **options) == run_id
        plain = await client.trigger(name, payload, **{**options, "debounce": None})
    row = run_row(db, run_id)
    assert (row["environment"], row["queue"], row["task"], row["machine"]) == (name,) * 4
    assert (row["payload"], row["metadata"], row["tags"]) == (
        payload,
        options["metadata"],
        options["tags"],
    )
    assert run_row(db, plain)["payload"] == payload


def test_tags_may_be_any_collection_of_strings(dsn: str, db: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn) as conn:
        ids = [
            fairlane.trigger(conn, "send", tags=tags)
            for tags in (["a", "b"], ("a", "b"), {"b"}, frozenset({"b"}))
        ]
        for refused in ("ab", b"ab", {"a": 1}, 7):
            with pytest.raises(TriggerOptionError, match="must be a collection of strings"):
                fairlane.trigger(conn, "send", tags=refused)
        conn.commit()
    assert [run_row(db, run_id)["tags"] for run_id in ids] == [["a", "b"], ["a", "b"], ["b"], ["b"]]


@pytest.mark.anyio
async def test_a_long_idempotency_key_is_stored_hashed(dsn: str) -> None:
    key = "k" * 1_000_000
    async with AsyncClient(dsn) as client:
        first = await client.trigger("send", 1, idempotency_key=key)
        assert await client.trigger("send", 2, idempotency_key=key) == first
        assert await client.trigger("send", 3, idempotency_key=key[:-1]) != first
        stored = (await client.get_run(first)).idempotency_key
    assert stored is not None
    assert len(stored) == 64


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["{bad"], "error: payload is not valid JSON: ", id="payload"),
        pytest.param(["1", "--metadata", "{bad"], "error: --metadata is not valid JSON", id="meta"),
        pytest.param(["[" * 10_000], "error: payload nests arrays and objects", id="deep"),
        pytest.param(["1", "--metadata", "[1]"], "error: metadata=[1]: must be a map", id="list"),
        pytest.param(["1", "--queue", "q" * 500], "error: queue='qqq", id="long-queue"),
    ],
)
def test_cli_trigger_reports_bad_input_in_one_line(
    dsn: str,
    db: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    assert main(["trigger", "send", *argv, "--dsn", dsn]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(message)
    assert captured.err.count("\n") == 1, "one line, no traceback"
    assert run_count(db) == 0


def test_cli_trigger_takes_options_not_given_as_defaults(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trigger", "send", '{"a": 1}', "--dsn", dsn]) == 0
    run_id = int(capsys.readouterr().out)
    row = run_row(db, run_id)
    assert (row["payload"], row["max_attempts"], row["tags"], row["metadata"]) == (
        {"a": 1},
        3,
        [],
        {},
    )
