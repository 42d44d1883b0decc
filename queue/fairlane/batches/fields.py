"""The top-level fields of one JSON object read in pieces, without holding the object.

An oversized batch line is never held whole: its bytes pass through ``TopLevelFields`` on the
way to being dropped. The scanner follows the object's structure (strings and their escapes,
nesting of objects and arrays) and keeps the raw text of the values of a few chosen keys of the
top level only, so an ``"index"`` inside the payload, or inside a string, is never taken for
the item's own. Strings and nested values are skipped with regular expressions, so a
multi-megabyte line costs little; a line's pieces may be cut anywhere.

It reads structure, it does not validate: on anything that is not an object it stops, keeping
what it found before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

# A string's body up to its closing quote, escapes included ("\\" then any byte); it stops
# early at a backslash that ends the piece (its escaped byte is in the next piece).
_STRING_BODY = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.DOTALL)
# Inside a nested value: everything up to the next quote or bracket.
_NESTED = re.compile(rb'[^"{}\[\]]*+')
# The end of a number or literal (true, false, null) at the top level.
_SCALAR_END = re.compile(rb"[\s,}\]]")

# Where the scanner is at the top level.
_BEFORE, _KEY, _COLON, _VALUE, _AFTER, _DONE = range(6)
# What the string being read is.
_SKIP, _READ_KEY, _READ_VALUE = range(3)


class TopLevelFields:
    """Feed the pieces of one line with ``feed``; ``values`` then maps each chosen key found
    at the top level to the raw JSON text of its last value (as a JSON parser keeps the last
    of repeated keys), or to None when the value is an object, an array, or longer than
    ``max_value_bytes``. ``started`` says whether the line held anything but whitespace."""

    def __init__(self, keys: Iterable[str], max_value_bytes: int = 1024) -> None:
        self._wanted = frozenset(keys)
        # A key is read with its quotes, and may spell each character as a \uXXXX escape.
        self._max_key = 6 * max((len(key) for key in self._wanted), default=0) + 2
        self.max_value_bytes = max_value_bytes
        self.values: dict[str, bytes | None] = {}
        self.started = False
        self._state = _BEFORE
        self._depth = 0
        self._string: int | None = None  # what the open string is, if one is open
        self._escaped = False  # the previous piece ended inside a string on a backslash
        self._scalar = False  # inside a number or literal at the top level
        self._key: str | None = None  # the chosen key whose value comes next
        self._kept: bytearray | None = None  # the key or chosen value being read
        self._limit = 0

    def feed(self, data: bytes | bytearray) -> None:
        at, end = 0, len(data)
        while at < end and self._state != _DONE:
            if self._string is not None:
                at = self._in_string(data, at)
            elif self._scalar:
                at = self._in_scalar(data, at)
            elif self._depth > 1:
                at = self._in_nested(data, at)
            else:
                at = self._at_top(data, at)

    # -- what is kept ----------------------------------------------------------------------

    def _keep_from(self, limit: int, first: bytes = b"") -> None:
        self._kept = bytearray(first)
        self._limit = limit

    def _keep(self, data: bytes | bytearray) -> None:
        if self._kept is None:
            return
        if len(self._kept) + len(data) > self._limit:
            self._kept = None  # too long: a key that is not chosen, or a value past the bound
            self._limit = -1
            return
        self._kept += data

    def _kept_value(self) -> None:
        if self._key is not None:
            self.values[self._key] = bytes(self._kept) if self._kept is not None else None
        self._kept = None
        self._key = None

    # -- the top level ---------------------------------------------------------------------

    def _at_top(self, data: bytes | bytearray, at: int) -> int:
        byte = bytes(data[at : at + 1])
        if byte in (b" ", b"\t", b"\r", b"\n"):
            return at + 1
        self.started = True
        state = self._state
        if state == _BEFORE:
            if byte == b"{":
                self._depth, self._state = 1, _KEY
            else:
                self._state = _DONE  # not an object
        elif state == _KEY:
            if byte == b'"':
                self._string = _READ_KEY
                self._keep_from(self._max_key, b'"')
            else:
                self._close_or_stop(byte)
        elif state == _COLON:
            self._state = _VALUE if byte == b":" else _DONE
        elif state == _VALUE:
            return self._value_starts(byte, at)
        elif state == _AFTER:
            if byte == b",":
                self._state = _KEY
            else:
                self._close_or_stop(byte)
        return at + 1

    def _close_or_stop(self, byte: bytes) -> None:
        """``}`` ends the object; anything else is not JSON. Either way the scan is over."""
        if byte == b"}":
            self._depth = 0
        self._state = _DONE

    def _value_starts(self, byte: bytes, at: int) -> int:
        if byte == b'"':
            self._string = _READ_VALUE if self._key is not None else _SKIP
            if self._key is not None:
                self._keep_from(self.max_value_bytes, b'"')
            return at + 1
        if byte in (b"{", b"["):
            self._kept = None  # an object or array: no scalar value
            self._kept_value()
            self._depth = 2
            return at + 1
        self._scalar = True
        if self._key is not None:
            self._keep_from(self.max_value_bytes)
        return at  # the scalar's first byte is read with the rest of it

    def _in_scalar(self, data: bytes | bytearray, at: int) -> int:
        found = _SCALAR_END.search(data, at)
        stop = found.start() if found else len(data)
        self._keep(data[at:stop])
        if found:
            self._scalar = False
            self._kept_value()
            self._state = _AFTER
        return stop

    # -- strings and nested values ---------------------------------------------------------

    def _in_string(self, data: bytes | bytearray, at: int) -> int:
        if self._escaped:
            self._escaped = False
            self._keep(data[at : at + 1])
            return at + 1
        body = _STRING_BODY.match(data, at)
        stop = body.end() if body else at
        self._keep(data[at:stop])
        if stop == len(data):
            return stop  # the string goes on in the next piece
        if data[stop : stop + 1] == b"\\":
            self._keep(b"\\")  # the last byte of the piece; its escaped byte comes next
            self._escaped = True
            return stop + 1
        self._keep(b'"')
        self._string_ends()
        return stop + 1

    def _string_ends(self) -> None:
        kind, self._string = self._string, None
        if self._depth > 1:
            return
        if kind == _READ_KEY:
            self._key = self._chosen(self._kept)
            self._kept = None
            self._state = _COLON
        else:
            if kind == _READ_VALUE:
                self._kept_value()
            self._key = None
            self._state = _AFTER

    def _chosen(self, raw: bytearray | None) -> str | None:
        """The key just read, when it is one of the chosen ones."""
        if raw is None:
            return None
        try:
            name = json.loads(raw)
        except ValueError:
            return None
        return name if name in self._wanted else None

    def _in_nested(self, data: bytes | bytearray, at: int) -> int:
        skipped = _NESTED.match(data, at)
        stop = skipped.end() if skipped else at
        if stop == len(data):
            return stop
        byte = data[stop : stop + 1]
        if byte == b'"':
            self._string = _SKIP
        elif byte in (b"{", b"["):
            self._depth += 1
        else:
            self._depth -= 1
            if self._depth == 1:
                self._state = _AFTER
        return stop + 1
