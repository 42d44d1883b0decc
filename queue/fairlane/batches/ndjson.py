"""Streaming NDJSON for batch items: bytes in chunks of any size, lines of bounded size.

The size limit is checked on bytes before decoding, so an oversized line never sits in memory
whole: once a line outgrows the limit its bytes go through a scanner of its top-level fields
(``fairlane.batches.fields``) and are dropped, however many chunks that takes, and at its end
the parser emits an ``OversizedItem`` marker with the line's own ``"index"`` and ``"task"``
(keys of the item object itself, never ones nested in its payload). Blank lines are skipped.
A line that is not UTF-8 or not a JSON object raises ``BatchLineError`` naming the line and
the item index; lines before it were yielded.

An item without an ``"index"`` takes ``first_index`` plus its position among the items of the
stream, so a stream resent from its k-th item passes ``first_index=k``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fairlane.batches.fields import TopLevelFields
from fairlane.errors import BatchLineError, BatchOffsetError

DEFAULT_MAX_ITEM_BYTES = 3 * 1024 * 1024
# Longest task name kept from an oversized line (longer ones are recorded as unknown).
MAX_TASK_BYTES = 1024


@dataclass(frozen=True, slots=True)
class BatchItem:
    index: int
    task: str
    payload: Any = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OversizedItem:
    """A line past the size limit: it becomes a pre-failed PAYLOAD_TOO_LARGE run."""

    index: int
    task: str | None
    size_at_least: int


ParsedLine = BatchItem | OversizedItem


def check_first_index(first_index: object) -> None:
    """Raises ``BatchOffsetError`` unless ``first_index`` is a non-negative integer."""
    if isinstance(first_index, bool) or not isinstance(first_index, int) or first_index < 0:
        raise BatchOffsetError(first_index)


class NdjsonItemParser:
    """Feed chunks with ``feed``; call ``finish`` at the end of the stream. Items without an
    index are numbered from ``first_index``."""

    def __init__(self, max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES, first_index: int = 0) -> None:
        check_first_index(first_index)
        self.max_item_bytes = max_item_bytes
        self.first_index = first_index
        self._buffer = bytearray()
        self._oversized: TopLevelFields | None = None  # the fields of an oversized line
        self.lines = 0  # lines seen, blank ones included (for error messages)
        self.items = 0  # items emitted: the position used when a line names no index

    def feed(self, chunk: bytes) -> Iterator[ParsedLine]:
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            if (
                newline >= 0
                and not self._buffer
                and self._oversized is None
                and newline - start <= self.max_item_bytes
            ):
                # A whole line inside the chunk (most lines): parsed from the chunk itself.
                self.lines += 1
                raw = chunk[start:newline]
                if raw.strip():
                    yield self._parse(raw)
                start = newline + 1
                continue
            end = len(chunk) if newline < 0 else newline
            piece = chunk[start:end]
            if self._oversized is not None:
                self._oversized.feed(piece)  # the rest of an oversized line: scanned, dropped
            elif len(self._buffer) + len(piece) > self.max_item_bytes:
                self._oversized = TopLevelFields(("index", "task"), MAX_TASK_BYTES)
                self._oversized.feed(self._buffer)
                self._oversized.feed(piece)
                self._buffer.clear()
            else:
                self._buffer += piece
            if newline < 0:
                break
            yield from self._end_of_line()
            start = newline + 1

    def finish(self) -> Iterator[ParsedLine]:
        """The last line may lack its newline."""
        if self._buffer or self._oversized is not None:
            yield from self._end_of_line()

    def _end_of_line(self) -> Iterator[ParsedLine]:
        self.lines += 1
        if self._oversized is not None:
            fields, self._oversized = self._oversized, None
            if fields.started:
                yield self._oversized_item(fields)
            return
        raw = bytes(self._buffer)
        self._buffer.clear()
        if raw.strip():
            yield self._parse(raw)

    def _oversized_item(self, fields: TopLevelFields) -> OversizedItem:
        position = self.first_index + self.items
        if "index" in fields.values:
            index = self._index(_decoded(fields.values["index"]), position)
        else:
            index = position
        task = _decoded(fields.values.get("task"))
        self.items += 1
        return OversizedItem(
            index=index,
            task=task if isinstance(task, str) and task and "\x00" not in task else None,
            size_at_least=self.max_item_bytes + 1,
        )

    def _index(self, index: object, position: int) -> int:
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise BatchLineError(
                self.lines, position, f"index {index!r} is not a non-negative integer"
            )
        return index

    def _parse(self, raw: bytes) -> BatchItem:
        position = self.first_index + self.items
        line = self.lines
        try:
            document = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise BatchLineError(line, position, f"not valid UTF-8 ({error.reason})") from None
        except json.JSONDecodeError as error:
            raise BatchLineError(line, position, f"not valid JSON ({error.msg})") from None
        except ValueError as error:
            # Valid JSON Python will not read: an integer of more than 4300 digits.
            raise BatchLineError(line, position, f"not readable JSON ({error})") from None
        if not isinstance(document, dict) or not isinstance(document.get("task"), str):
            raise BatchLineError(line, position, 'an item is an object with a "task" string')
        index = self._index(document.get("index", position), position)
        options = document.get("options") or {}
        if not isinstance(options, dict):
            raise BatchLineError(line, index, '"options" must be an object')
        self.items += 1
        return BatchItem(
            index=index, task=document["task"], payload=document.get("payload"), options=options
        )


class _Unreadable:
    """A value an oversized line holds where a scalar was expected."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _decoded(raw: bytes | None) -> object:
    """A value the scanner kept, decoded."""
    if raw is None:
        return _Unreadable("an object, an array or an overlong value")
    try:
        return json.loads(raw)
    except ValueError:
        return _Unreadable(raw.decode("utf-8", "replace"))


def parse_chunks(
    chunks: Iterable[bytes], max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES, first_index: int = 0
) -> Iterator[ParsedLine]:
    parser = NdjsonItemParser(max_item_bytes, first_index)
    for chunk in chunks:
        yield from parser.feed(chunk)
    yield from parser.finish()


async def parse_stream(
    chunks: AsyncIterable[bytes],
    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    first_index: int = 0,
) -> AsyncIterator[ParsedLine]:
    parser = NdjsonItemParser(max_item_bytes, first_index)
    async for chunk in chunks:
        for parsed in parser.feed(chunk):
            yield parsed
    for parsed in parser.finish():
        yield parsed
