"""The scanner of an oversized line's top-level fields agrees with a JSON parser, whatever the
nesting, the strings and their escapes, and wherever the line is cut."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest

from fairlane.batches.fields import TopLevelFields

KEYS = ("index", "task")

DOCUMENTS = [
    # The real index after nested ones, in objects and arrays.
    b'{"task": "t", "payload": {"index": 3, "deep": [{"index": 4}]}, "index": 7}',
    # Key text inside strings, with escaped quotes around it.
    b'{"payload": "\\"index\\": 3, \\"task\\": \\"x\\"", "index": 7, "task": "real"}',
    # A string ending in an escaped backslash, then the index.
    b'{"payload": "ends with a backslash \\\\", "index": 5}',
    # Brackets and braces inside strings, at depth.
    b'{"payload": ["]", "}", "{", "[", {"s": "}}]]"}], "index": 2, "task": "t"}',
    # A key spelled with an escape is the same key.
    b'{"ind\\u0065x": 9, "t\\u0061sk": "e"}',
    # Repeated keys: the last one counts, as in json.loads.
    b'{"index": 1, "task": "a", "index": 2, "task": "b"}',
    # An index that is not a scalar, a task that is not a string.
    b'{"index": {"index": 1}, "task": ["t"]}',
    b'{"index": [1], "task": null}',
    # Numbers and literals of every shape, and spacing anywhere.
    b'{ "index" : 12 , "task":"x" , "other": true }',
    b'{"index":-1,"task":"\\u00e9\\n"}',
    b'{"index": 1.5e3, "task": false}',
    b'{"index": 0}',
    b'{"task": "no index", "payload": null}',
    b"{}",
    # Not an object: nothing at the top level of an item.
    b'[{"index": 1}]',
    b'"index"',
]


def expected(document: bytes) -> dict[str, Any]:
    """What a JSON parser says the top-level fields are (None: not a scalar)."""
    parsed = json.loads(document)
    if not isinstance(parsed, dict):
        return {}
    return {
        key: None if isinstance(parsed[key], dict | list) else parsed[key]
        for key in KEYS
        if key in parsed
    }


def scanned(pieces: list[bytes]) -> dict[str, Any]:
    fields = TopLevelFields(KEYS)
    for piece in pieces:
        fields.feed(piece)
    assert fields.started
    return {key: None if raw is None else json.loads(raw) for key, raw in fields.values.items()}


def cut(data: bytes, *cuts: int) -> list[bytes]:
    edges = [0, *sorted(cuts), len(data)]
    return [data[start:end] for start, end in pairwise(edges)]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_whole_and_cut_at_every_position(document: bytes) -> None:
    want = expected(document)
    assert scanned([document]) == want
    for at in range(len(document) + 1):
        assert scanned(cut(document, at)) == want, at


@pytest.mark.parametrize("document", DOCUMENTS)
def test_byte_by_byte_and_at_every_pair_of_positions(document: bytes) -> None:
    want = expected(document)
    assert scanned([document[i : i + 1] for i in range(len(document))]) == want
    for first in range(len(document) + 1):
        for second in range(first, len(document) + 1, 3):
            assert scanned(cut(document, first, second)) == want, (first, second)


def test_a_value_past_its_bound_is_unreadable_and_a_long_key_is_not_chosen() -> None:
    fields = TopLevelFields(KEYS, max_value_bytes=8)
    fields.feed(b'{"task": "a task name longer than eight bytes", "index": 12345678901')
    fields.feed(b', "index_but_longer": 3}')
    assert fields.values == {"task": None, "index": None}


def test_a_megabyte_payload_before_the_index_is_skipped_quickly() -> None:
    payload = json.dumps({"rows": [{"index": i, "s": "x\\" * 20} for i in range(20_000)]})
    document = f'{{"task": "t", "payload": {payload}, "index": 42}}'.encode()
    assert len(document) > 1_000_000
    fields = TopLevelFields(KEYS)
    for start in range(0, len(document), 65536):
        fields.feed(document[start : start + 65536])
    assert fields.values == {"task": b'"t"', "index": b"42"}


def test_whitespace_only_is_not_started() -> None:
    fields = TopLevelFields(KEYS)
    fields.feed(b"   \t  ")
    assert not fields.started
    assert fields.values == {}
