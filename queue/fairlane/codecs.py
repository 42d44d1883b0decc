"""Typed payloads and results: a task whose handler annotates its payload (or its result) with a
dataclass, or a pydantic model when pydantic is installed, has it validated and converted.

A ``Codec`` turns a value into the JSON that is stored (``encode``, at trigger time: a bad value
raises ``PayloadError`` before anything is sent) and stored JSON back into the value
(``decode``, before the handler runs: a stored payload that no longer fits fails the run with
code ``INVALID_PAYLOAD``, without a retry). Dataclasses need nothing but the standard library:
their fields are checked against their annotations (``int``, ``float``, ``str``, ``bool``,
``None``, unions and ``Optional``, ``Literal``, enums, ``list``/``tuple``/``set``/``dict``,
``datetime``/``date`` as ISO strings, nested dataclasses, ``Any``). Any other annotation
(``dict[str, Any]``, ``int``, none) means no codec: the payload is stored and handed over as
JSON, as ever.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Literal, Protocol, Union, get_args, get_origin, get_type_hints

from fairlane.errors import PayloadError


class Codec(Protocol):
    """Converts a task's payload or result type to JSON values and back, validating both
    ways."""

    @property
    def type(self) -> type[Any]: ...

    def encode(self, value: Any) -> Any: ...

    def decode(self, data: Any) -> Any: ...


def _refused(what: str, kind: type[Any], invalid: Exception) -> PayloadError:
    return PayloadError(f"{what} is not a valid {kind.__name__}: {invalid}")


class _Invalid(ValueError):
    """A value that does not fit its annotation; ``path`` says where."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path or 'value'}: {reason}")


@dataclasses.dataclass(frozen=True, slots=True)
class DataclassCodec:
    type: type[Any]
    what: str = "payload"

    def encode(self, value: Any) -> Any:
        # A mapping that builds the dataclass is accepted too (untyped callers). Either way
        # the JSON is checked against the annotations: a dataclass does not check its fields.
        data = _to_json(value)
        try:
            _convert(self.type, data, "")
        except _Invalid as invalid:
            raise _refused(self.what, self.type, invalid) from None
        return data

    def decode(self, data: Any) -> Any:
        try:
            return _convert(self.type, data, "")
        except _Invalid as invalid:
            raise _refused(self.what, self.type, invalid) from None


@dataclasses.dataclass(frozen=True, slots=True)
class PydanticCodec:
    type: type[Any]
    what: str = "payload"

    def encode(self, value: Any) -> Any:
        if not isinstance(value, self.type):
            value = self.decode(value)
        return value.model_dump(mode="json")

    def decode(self, data: Any) -> Any:
        from pydantic import ValidationError

        try:
            return self.type.model_validate(data)
        except ValidationError as invalid:
            raise _refused(self.what, self.type, invalid) from None


def codec_for(annotation: Any, what: str = "payload") -> Codec | None:
    """The codec of an annotation, or None when values of it are plain JSON."""
    if not isinstance(annotation, type):
        return None
    if dataclasses.is_dataclass(annotation):
        return DataclassCodec(annotation, what)
    if _is_pydantic_model(annotation):
        return PydanticCodec(annotation, what)
    return None


def handler_codecs(
    handler: Any, namespace: Mapping[str, Any] | None = None
) -> tuple[Codec | None, Codec | None]:
    """(payload codec, result codec) from a handler's annotations ``(ctx, payload) -> result``.
    ``namespace`` resolves names of the scope the handler was defined in (a class local to a
    function, under ``from __future__ import annotations``)."""
    try:
        hints = get_type_hints(handler, localns=dict(namespace or {}))
    except Exception:
        # Annotations that cannot be resolved (names only imported for type checking): the
        # task takes and returns plain JSON.
        return None, None
    import inspect

    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return None, None
    payload = hints.get(parameters[1].name) if len(parameters) > 1 else None
    return codec_for(payload, "payload"), codec_for(hints.get("return"), "result")


def _is_pydantic_model(annotation: type[Any]) -> bool:
    try:
        from pydantic import BaseModel
    except ImportError:
        return False
    return issubclass(annotation, BaseModel)


# -- dataclasses, checked against their annotations -------------------------------------------


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {field.name: _to_json(getattr(value, field.name)) for field in fields}
    if isinstance(value, enum.Enum):
        return _to_json(value.value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(key): _to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_to_json(item) for item in value]
    return value


def _convert(annotation: Any, value: Any, path: str) -> Any:  # noqa: C901
    """``value`` (JSON, or already of the type) as ``annotation``, or ``_Invalid``."""
    if annotation is Any or annotation is object:
        return value
    if annotation is None or annotation is type(None):
        if value is not None:
            raise _Invalid(path, f"expected null, got {type(value).__name__}")
        return None
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        for option in get_args(annotation):
            try:
                return _convert(option, value, path)
            except _Invalid:
                continue
        raise _Invalid(path, f"{value!r} matches none of {annotation}")
    if origin is Literal:
        if value not in get_args(annotation):
            raise _Invalid(path, f"must be one of {get_args(annotation)}, not {value!r}")
        return value
    if origin in (list, set, frozenset, tuple) or annotation in (list, set, frozenset, tuple):
        return _sequence(annotation, origin or annotation, value, path)
    if origin is dict or annotation is dict:
        if not isinstance(value, Mapping):
            raise _Invalid(path, f"expected an object, got {type(value).__name__}")
        args = get_args(annotation)
        item_type = args[1] if len(args) == 2 else Any
        return {str(key): _convert(item_type, item, f"{path}.{key}") for key, item in value.items()}
    if isinstance(annotation, type):
        return _scalar(annotation, value, path)
    return value


def _sequence(annotation: Any, container: type[Any], value: Any, path: str) -> Any:
    if isinstance(value, str | bytes | Mapping) or not isinstance(
        value, list | tuple | set | frozenset
    ):
        raise _Invalid(path, f"expected an array, got {type(value).__name__}")
    args = get_args(annotation)
    if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(args) != len(value):
            raise _Invalid(path, f"expected {len(args)} items, got {len(value)}")
        return tuple(
            _convert(item_type, item, f"{path}[{n}]")
            for n, (item_type, item) in enumerate(zip(args, value, strict=True))
        )
    item_type = args[0] if args else Any
    items = [_convert(item_type, item, f"{path}[{n}]") for n, item in enumerate(value)]
    return container(items) if container is not list else items


def _scalar(annotation: type[Any], value: Any, path: str) -> Any:  # noqa: C901
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            value = _to_json(value)
        return _dataclass(annotation, value, path)
    if issubclass(annotation, enum.Enum):
        if isinstance(value, annotation):
            return value
        try:
            return annotation(value)
        except ValueError:
            raise _Invalid(path, f"{value!r} is not a {annotation.__name__}") from None
    if annotation is bool:
        if not isinstance(value, bool):
            raise _Invalid(path, f"expected a boolean, got {type(value).__name__}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(path, f"expected an integer, got {type(value).__name__}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(path, f"expected a number, got {type(value).__name__}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise _Invalid(path, f"expected a string, got {type(value).__name__}")
        return value
    if annotation in (datetime, date):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, str):
            raise _Invalid(path, f"expected an ISO {annotation.__name__} string")
        try:
            return annotation.fromisoformat(value)
        except ValueError:
            raise _Invalid(path, f"{value!r} is not an ISO {annotation.__name__}") from None
    if not isinstance(value, annotation):
        raise _Invalid(path, f"expected {annotation.__name__}, got {type(value).__name__}")
    return value


def _dataclass(cls: type[Any], value: Any, path: str) -> Any:
    if not isinstance(value, Mapping):
        raise _Invalid(path, f"expected an object for {cls.__name__}, got {type(value).__name__}")
    try:
        hints = get_type_hints(cls)
    except Exception:
        hints = {}
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise _Invalid(path, f"unknown field(s) {', '.join(map(str, unknown))}")
    arguments: dict[str, Any] = {}
    for name, field in fields.items():
        where = f"{path}.{name}" if path else name
        if name not in value:
            required = field.default is dataclasses.MISSING
            if required and field.default_factory is dataclasses.MISSING:
                raise _Invalid(where, "is required")
            continue
        arguments[name] = _convert(hints.get(name, Any), value[name], where)
    return cls(**arguments)
