"""The streaming NDJSON parser behind batch ingestion."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest

from fairlane.batches.ndjson import (
    BatchItem,
    NdjsonItemParser,
    OversizedItem,
    parse_chunks,
)
from fairlane.errors import BatchLineError, BatchOffsetError

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
    # The whole line is scanned now (not only its first bytes), so its task is found too.
    data = line({"task": "a"}) + b'{"payload": "' + b"y" * 500 + b'", "task": "t"}\n'
    assert list(parse_chunks([data], LIMIT))[1] == OversizedItem(1, "t", 101)


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


def test_an_integer_python_will_not_read_is_a_bad_line() -> None:
    parser = NdjsonItemParser()
    with pytest.raises(BatchLineError) as raised:
        list(parser.feed(b'{"task": "x", "payload": ' + b"1" * 5000 + b"}\n"))
    assert (raised.value.line, raised.value.index) == (1, 0)
    assert "4300 digits" in str(raised.value)


# -- the index of an oversized line -------------------------------------------------------

NESTED = (
    line({"task": "big", "payload": {"index": 0, "blob": "x" * 300}, "index": 2})
    + line({"task": "a", "index": 0})
    + line({"task": "s", "payload": '"index": 1, ' + "y" * 300, "index": 3})
    + line({"task": "b", "index": 1})
    + line({"payload": ["z" * 600, {"index": 9}], "task": "late", "index": 4})
)


def test_an_oversized_lines_index_is_its_own_not_one_in_its_payload() -> None:
    want = [
        OversizedItem(2, "big", LIMIT + 1),
        BatchItem(0, "a"),
        OversizedItem(3, "s", LIMIT + 1),
        BatchItem(1, "b"),
        OversizedItem(4, "late", LIMIT + 1),
    ]
    assert list(parse_chunks([NESTED], LIMIT)) == want
    for cut in range(len(NESTED) + 1):
        assert list(parse_chunks(chunked(NESTED, cut), LIMIT)) == want, cut
    for size in (1, 2, 3, 5, 64, 101):
        chunks = [NESTED[i : i + size] for i in range(0, len(NESTED), size)]
        assert list(parse_chunks(chunks, LIMIT)) == want, size


@pytest.mark.parametrize("index", [-1, "3", 1.5, True, None, [3]])
def test_an_oversized_line_with_a_bad_index_is_a_bad_line(index: object) -> None:
    data = line({"task": "a"}) + line({"task": "big", "index": index, "payload": "x" * 300})
    parser = NdjsonItemParser(LIMIT)
    with pytest.raises(BatchLineError) as raised:
        list(parser.feed(data))
    assert (raised.value.line, raised.value.index) == (2, 1)
    assert "not a non-negative integer" in str(raised.value)


def test_an_oversized_blank_line_is_skipped() -> None:
    data = line({"task": "a"}) + b" " * 300 + b"\n" + line({"task": "b"})
    assert list(parse_chunks([data], LIMIT)) == [BatchItem(0, "a"), BatchItem(1, "b")]


# -- items without an index ----------------------------------------------------------------


def test_items_without_an_index_are_numbered_from_first_index() -> None:
    data = (
        line({"task": "a"})
        + line({"task": "b", "index": 0})
        + line({"task": "big", "payload": "x" * 300})
        + line({"task": "c"})
    )
    assert list(parse_chunks([data], LIMIT, first_index=10)) == [
        BatchItem(10, "a"),
        BatchItem(0, "b"),
        OversizedItem(12, "big", LIMIT + 1),
        BatchItem(13, "c"),
    ]
    parser = NdjsonItemParser(LIMIT, first_index=10)
    with pytest.raises(BatchLineError) as raised:
        list(parser.feed(line({"task": "a"}) + b"{not json}\n"))
    assert (raised.value.line, raised.value.index) == (2, 11)


@pytest.mark.parametrize("first_index", [-1, True, 1.0, "2", None])
def test_a_bad_first_index_is_refused(first_index: Any) -> None:
    with pytest.raises(BatchOffsetError) as raised:
        NdjsonItemParser(LIMIT, first_index)
    assert raised.value.first_index is first_index
