"""Streaming NDJSON for batch items: bytes in chunks of any size, lines of bounded size.

The size limit is checked on bytes before decoding, so an oversized line never sits in memory
whole: once a line outgrows the limit the parser emits an ``OversizedItem`` marker for it and
discards bytes up to its newline, however many chunks that takes. The marker's index comes from
an ``"index"`` field found near the start of the line when there is one, else from the line's
position among items. Blank lines are skipped. A line that is not UTF-8 or not a JSON object
raises ``BatchLineError`` naming the line and the item index; lines before it were yielded.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fairlane.errors import FairlaneError

DEFAULT_MAX_ITEM_BYTES = 3 * 1024 * 1024
# How much of an oversized line is kept to look for its index.
INDEX_SCAN_BYTES = 512
_INDEX_FIELD = re.compile(rb'"index"\s*:\s*(\d+)')


class BatchLineError(FairlaneError):
    """A batch line is not valid UTF-8, not JSON, or not an item object."""

    def __init__(self, line: int, index: int, reason: str) -> None:
        self.line = line
        self.index = index
        self.reason = reason
        super().__init__(f"batch line {line} (item {index}): {reason}")


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


class NdjsonItemParser:
    """Feed chunks with ``feed``; call ``finish`` at the end of the stream."""

    def __init__(self, max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES) -> None:
        self.max_item_bytes = max_item_bytes
        self._buffer = bytearray()
        self._skipping = False  # inside the rest of an oversized line
        self.lines = 0  # lines seen, blank ones included (for error messages)
        self.items = 0  # items emitted: the position used when a line names no index

    def feed(self, chunk: bytes) -> Iterator[ParsedLine]:
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            piece = chunk[start:end]
            if self._skipping:
                pass  # the tail of an oversized line: dropped unread
            elif len(self._buffer) + len(piece) > self.max_item_bytes:
                yield self._oversized(bytes(self._buffer) + piece[:INDEX_SCAN_BYTES])
                self._buffer.clear()
                self._skipping = True
            else:
                self._buffer += piece
            if newline < 0:
                break
            yield from self._end_of_line()
            start = newline + 1

    def finish(self) -> Iterator[ParsedLine]:
        """The last line may lack its newline."""
        if self._buffer or self._skipping:
            yield from self._end_of_line()

    def _end_of_line(self) -> Iterator[ParsedLine]:
        self.lines += 1
        if self._skipping:
            self._skipping = False
            return
        raw = bytes(self._buffer)
        self._buffer.clear()
        if raw.strip():
            yield self._parse(raw)

    def _oversized(self, head: bytes) -> OversizedItem:
        found = _INDEX_FIELD.search(head[:INDEX_SCAN_BYTES])
        index = int(found.group(1)) if found else self.items
        task = re.search(rb'"task"\s*:\s*"([^"\\]{1,200})"', head[:INDEX_SCAN_BYTES])
        self.items += 1
        return OversizedItem(
            index=index,
            task=task.group(1).decode("utf-8", "replace") if task else None,
            size_at_least=self.max_item_bytes + 1,
        )

    def _parse(self, raw: bytes) -> BatchItem:
        position = self.items
        line = self.lines
        try:
            document = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise BatchLineError(line, position, f"not valid UTF-8 ({error.reason})") from None
        except json.JSONDecodeError as error:
            raise BatchLineError(line, position, f"not valid JSON ({error.msg})") from None
        if not isinstance(document, dict) or not isinstance(document.get("task"), str):
            raise BatchLineError(line, position, 'an item is an object with a "task" string')
        index = document.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise BatchLineError(line, position, f"index {index!r} is not a non-negative integer")
        options = document.get("options") or {}
        if not isinstance(options, dict):
            raise BatchLineError(line, index, '"options" must be an object')
        self.items += 1
        return BatchItem(index=index, task=document["task"], payload=document.get("payload"),
                         options=options)  # fmt: skip


def parse_chunks(
    chunks: Iterable[bytes], max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES
) -> Iterator[ParsedLine]:
    parser = NdjsonItemParser(max_item_bytes)
    for chunk in chunks:
        yield from parser.feed(chunk)
    yield from parser.finish()


async def parse_stream(
    chunks: AsyncIterable[bytes], max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES
) -> AsyncIterator[ParsedLine]:
    parser = NdjsonItemParser(max_item_bytes)
    async for chunk in chunks:
        for parsed in parser.feed(chunk):
            yield parsed
    for parsed in parser.finish():
        yield parsed
