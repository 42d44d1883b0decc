"""``ctx.metadata``: the run's metadata, read as a dict, written through ``ctx.set_metadata``.

Every write (``update``, ``metadata[key] = value``, ``setdefault``, ``|=``) is a merge of
top-level keys handed to the same path as ``ctx.set_metadata``: checked as JSON at once,
visible in ``ctx.metadata`` at once, written by the worker coalesced (at most every
``metadata_interval``, and before the run's outcome) and fenced by the run's lease token.
Keys are never removed: the stored metadata is merged into, so a removal could not be written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, Self

from fairlane.errors import MetadataRemovalError

Merge = Callable[[dict[str, Any]], None]


def _fields(
    source: Mapping[str, Any] | Iterable[tuple[str, Any]], extra: dict[str, Any]
) -> dict[str, Any]:
    fields = dict(source)
    fields.update(extra)
    for key in fields:
        if not isinstance(key, str):
            raise TypeError(f"metadata keys are strings (JSON object keys), not {key!r}")
    return fields


class RunMetadata(dict[str, Any]):
    """A dict of the run's metadata whose writes merge into the run's stored metadata.

    It is a real dict (``json.dumps``, ``isinstance(..., dict)`` and ``dict(ctx.metadata)``
    work); ``del``, ``pop``, ``popitem`` and ``clear`` raise ``MetadataRemovalError``.
    A copy (``dict(...)``, ``copy.copy``, pickling) is a plain dict, detached from the run.
    """

    __slots__ = ("_merge",)

    def __init__(self, initial: Mapping[str, Any], merge: Merge) -> None:
        super().__init__(initial)
        self._merge = merge

    def absorb(self, fields: Mapping[str, Any]) -> None:
        """Take fields merged elsewhere (``ctx.set_metadata``): for the context only."""
        dict.update(self, fields)

    # -- writes: merged into the run's metadata --------------------------------------------

    def update(  # type: ignore[override]
        self, source: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), /, **fields: Any
    ) -> None:
        """``dict.update``, merged into the run's metadata as ``ctx.set_metadata`` is."""
        merged = _fields(source, fields)
        if merged:
            self._merge(merged)

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self.update({key: default})
        return self[key]

    def __ior__(self, other: Any) -> Self:  # type: ignore[override,misc]
        self.update(other)
        return self

    # -- removals: refused -----------------------------------------------------------------

    def __delitem__(self, key: str) -> NoReturn:
        raise MetadataRemovalError(key)

    def pop(self, key: str, *default: Any) -> NoReturn:
        raise MetadataRemovalError(key)

    def popitem(self) -> NoReturn:
        raise MetadataRemovalError()

    def clear(self) -> NoReturn:
        raise MetadataRemovalError()

    # -- copies are plain dicts ------------------------------------------------------------

    def copy(self) -> dict[str, Any]:
        return dict(self)

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:
        return dict, (dict(self),)
