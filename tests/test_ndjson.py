"""The streaming NDJSON parser behind batch ingestion."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from fairlane.batches.ndjson import (
    BatchItem,
    BatchLineError,
    NdjsonItemParser,
    OversizedItem,
    parse_chunks,
)

LIMIT = 100


def line(document: object) -> bytes:
    return json.dumps(document).encode() + b"\n"


STREAM = (
    line({"task": "a", "payload": 1})
    + b"\n   \n"
    + line({"task": "big", "index": 1, "payload": "x" * 300})
    + line({"task": "c", "payload": {"k": "v"}, "options": {"queue": "q"}})
    + line({"task": "d", "index": 7})
)
EXPECTED = [
    BatchItem(0, "a", 1),
    OversizedItem(1, "big", LIMIT + 1),
    BatchItem(2, "c", {"k": "v"}, {"queue": "q"}),
    BatchItem(7, "d", None),
]


def chunked(data: bytes, *cuts: int) -> list[bytes]:
    edges = [0, *sorted(cuts), len(data)]
    return [data[start:end] for start, end in pairwise(edges)]


def test_every_single_cut_point() -> None:
    for cut in range(len(STREAM) + 1):
        assert list(parse_chunks(chunked(STREAM, cut), LIMIT)) == EXPECTED, cut


def test_every_chunk_size() -> None:
    for size in range(1, len(STREAM) + 1):
        chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
        assert list(parse_chunks(chunks, LIMIT)) == EXPECTED, size


def test_cuts_around_the_oversized_line_and_its_newline() -> None:
    start = STREAM.index(b'{"task": "big"')
    end = STREAM.index(b"\n", start)
    for first in range(start - 2, end + 3):
        for second in (first + 1, first + LIMIT, end, end + 1, first + 250):
            if 0 <= first <= second <= len(STREAM):
                result = list(parse_chunks(chunked(STREAM, first, second), LIMIT))
                assert result == EXPECTED, (first, second)


def test_an_oversized_last_line_without_newline() -> None:
    data = line({"task": "a"}) + b'{"task": "z", "payload": "' + b"y" * 500
    assert list(parse_chunks([data], LIMIT)) == [BatchItem(0, "a"), OversizedItem(1, "z", 101)]


def test_an_oversized_line_without_index_takes_its_position() -> None:
    data = line({"task": "a"}) + b'{"payload": "' + b"y" * 500 + b'", "task": "t"}\n'
    assert list(parse_chunks([data], LIMIT))[1] == OversizedItem(1, None, 101)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b'{"task": "x", "payload": \xff}\n', "UTF-8"),
        (b'{"task": "x", "payload": }\n', "JSON"),
        (b'["not", "an", "object"]\n', "task"),
        (b'{"task": "x", "index": -1}\n', "index"),
        (b'{"task": "x", "options": 3}\n', "options"),
    ],
)
def test_bad_lines_name_line_and_index_after_keeping_earlier_items(bad: bytes, reason: str) -> None:
    parser = NdjsonItemParser(LIMIT)
    good = list(parser.feed(line({"task": "a"}) + b"\n" + line({"task": "b"})))
    assert [item.index for item in good] == [0, 1]
    with pytest.raises(BatchLineError) as raised:
        list(parser.feed(bad))
    assert raised.value.line == 4
    assert raised.value.index == 2
    assert reason in str(raised.value)
