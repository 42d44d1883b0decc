"""The caps on open event streams in one server process.

A stream holds no database connection, but it holds memory and a socket for as long as its
client stays: each environment (an admin's streams count as one more) may hold at most
``per_environment`` at once, and the server at most ``total``; the next answers 429 with
``Retry-After``, so one tenant's streams cannot take every place.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fairlane.errors import ConfigurationError
from fairlane.web.errors import ApiError

DEFAULT_STREAMS_PER_ENVIRONMENT = 1000
DEFAULT_MAX_STREAMS = 5000
ADMIN = "*"  # the streams of admin keys and dashboard sessions, which see every environment


def _cap(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} is an integer of at least 1, not {value!r}")
    return value


class StreamSlots:
    def __init__(self, per_environment: int | None = None, total: int | None = None) -> None:
        self.per_environment = _cap(
            "streams per environment", per_environment, DEFAULT_STREAMS_PER_ENVIRONMENT
        )
        self.total = _cap("the most streams", total, DEFAULT_MAX_STREAMS)
        self._open: dict[str, int] = {}
        self.open = 0

    def open_in(self, environment: str | None) -> int:
        return self._open.get(environment or ADMIN, 0)

    @contextmanager
    def hold(self, environment: str | None) -> Iterator[None]:
        """A place for one stream of ``environment`` (None: an admin's) while the block runs,
        or 429. Counted with no await between the check and the count."""
        owner = environment or ADMIN
        held = self._open.get(owner, 0)
        if held >= self.per_environment:
            raise _too_many(
                f"environment {owner!r} already has {held} event streams open, the most this "
                "server takes for one environment",
                self.per_environment,
            )
        if self.open >= self.total:
            raise _too_many(
                f"this server already has {self.open} event streams open, the most it takes",
                self.total,
            )
        self._open[owner] = held + 1
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1
            left = self._open[owner] - 1
            if left:
                self._open[owner] = left
            else:
                del self._open[owner]


def _too_many(message: str, limit: int) -> ApiError:
    return ApiError(
        429,
        "TooManyStreams",
        f"{message}; retry once one has ended",
        headers={"Retry-After": "1"},
        limit=limit,
    )
