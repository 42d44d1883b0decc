"""Reading Server-Sent Events from a real server with httpx: each event as (name, data)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Event:
    name: str
    data: Any


async def events(response: httpx.Response) -> AsyncIterator[Event]:
    """The events of an open ``text/event-stream`` response, comments (keep-alives) as
    ``Event("comment", text)``."""
    name, data = "message", list[str]()
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield Event(name, json.loads("\n".join(data)))
            name, data = "message", []
        elif line.startswith(":"):
            yield Event("comment", line[1:].strip())
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


async def until(stream: AsyncIterator[Event], name: str, **fields: Any) -> Event:
    """The next event called ``name`` whose data has ``fields``; the stream must not end first."""
    async for event in stream:
        data = event.data if isinstance(event.data, dict) else {}
        if event.name == name and all(data.get(k) == v for k, v in fields.items()):
            return event
    raise AssertionError(f"the stream ended before a {name} event with {fields}")
