"""Streamed uploads (NDJSON batch items) and what bounds them.

An upload waits on its client's network for as long as the client takes, so it never holds a
database connection while it waits: ``ingest_stream`` takes one from the pool only to store a
slice of items. What an upload still holds is a place among the environment's concurrent
uploads: at most ``per_environment`` at once in this server process, the next one answers 429
(``Retry-After``), so one tenant's stalled or slow uploads cannot take every place. An upload
that sends nothing for the idle timeout is ended (``BatchStreamIdleError``, 408) with what it
sent stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fairlane.errors import ConfigurationError
from fairlane.web.errors import ApiError

DEFAULT_UPLOAD_IDLE_TIMEOUT_S = 30.0
DEFAULT_UPLOADS_PER_ENVIRONMENT = 4


class UploadSlots:
    """How many uploads each environment has open in this process, and the cap on it."""

    def __init__(self, per_environment: int | None = None) -> None:
        if per_environment is None:
            per_environment = DEFAULT_UPLOADS_PER_ENVIRONMENT
        whole = isinstance(per_environment, int) and not isinstance(per_environment, bool)
        if not whole or per_environment < 1:
            raise ConfigurationError(
                f"uploads per environment is an integer of at least 1, not {per_environment!r}"
            )
        self.per_environment = per_environment
        self._open: dict[str, int] = {}

    def open_in(self, environment: str) -> int:
        return self._open.get(environment, 0)

    @contextmanager
    def hold(self, environment: str) -> Iterator[None]:
        """A place for one upload of ``environment`` while the block runs, or 429.

        Counted on the event loop with no await between the check and the count, so two
        uploads cannot both take the last place.
        """
        held = self._open.get(environment, 0)
        if held >= self.per_environment:
            raise ApiError(
                429,
                "TooManyUploads",
                f"environment {environment!r} already has {held} uploads open, the most this "
                "server takes at once; retry once one has ended",
                headers={"Retry-After": "1"},
                environment=environment,
                limit=self.per_environment,
            )
        self._open[environment] = held + 1
        try:
            yield
        finally:
            left = self._open[environment] - 1
            if left:
                self._open[environment] = left
            else:
                del self._open[environment]


def idle_timeout(value: float | None) -> float:
    """The idle timeout as given (seconds, > 0), or the default."""
    if value is None:
        return DEFAULT_UPLOAD_IDLE_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(
            f"the upload idle timeout is a positive number of seconds, not {value!r}"
        )
    return float(value)
