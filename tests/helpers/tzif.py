"""A time zone written by hand as a TZif file (RFC 8536, version 2), with the transitions a test
chooses, found by its name as any zone of the system's database (on a search path put first)."""

from __future__ import annotations

import struct
import zoneinfo
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True)
class LocalTime:
    """A local time type: its offset from UTC in seconds, DST or not, and its abbreviation."""

    offset: int
    dst: bool
    name: str


def tzif_bytes(types: Sequence[LocalTime], transitions: Sequence[tuple[datetime, int]]) -> bytes:
    """The file: ``transitions`` are (aware instant, index into ``types`` from then on), in
    order; before the first, ``types[0]`` holds, after the last the last one's type (an empty
    footer: no rule after the table). Instants must fit in 32 bits (before 2038)."""
    stamps = [(int(at.astimezone(UTC).timestamp()), index) for at, index in transitions]
    names = b""
    name_at: list[int] = []
    for kind in types:
        name_at.append(len(names))
        names += kind.name.encode("ascii") + b"\0"

    def block(time_format: str) -> bytes:
        header = b"TZif2" + bytes(15)
        header += struct.pack(">6l", 0, 0, 0, len(stamps), len(types), len(names))
        data = b"".join(struct.pack(time_format, at) for at, _ in stamps)
        data += bytes(index for _, index in stamps)
        for kind, at in zip(types, name_at, strict=True):
            data += struct.pack(">lBB", kind.offset, kind.dst, at)
        return header + data + names

    return block(">l") + block(">q") + b"\n\n"


@contextmanager
def zones_on_path(folder: Path, zones: dict[str, bytes]) -> Iterator[None]:
    """Write each TZif file under its name (``Area/Name``) in ``folder`` and search ``folder``
    first for zones by name while the block is open."""
    for name, data in zones.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    searched = zoneinfo.TZPATH
    zoneinfo.reset_tzpath([str(folder), *searched])
    try:
        yield
    finally:
        zoneinfo.reset_tzpath(searched)
