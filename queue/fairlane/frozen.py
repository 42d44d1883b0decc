"""A faster ``__init__`` for the frozen, slotted dataclasses a caller builds by the thousand.

A frozen dataclass's generated ``__init__`` sets every field through ``object.__setattr__``,
looked up anew for each field, and building a ``TriggerRequest`` of 19 fields was a good part
of a bulk trigger's client time per run. The ``__init__`` made here takes the same parameters
with the same defaults and sets each field through its slot's descriptor, bound once, which
halves that (bench/sittings/07-one-cancel-scope-per-runner-named-tuples-a-faster-request.md
has the figures). Nothing else changes: the instance is still frozen (assignment raises
``FrozenInstanceError``), compares, hashes, prints and ``dataclasses.replace``s as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Give ``cls`` (a frozen dataclass with slots, no ``default_factory`` and no
    ``__post_init__``) an ``__init__`` that sets its slots directly."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which this __init__ would skip")
    fields = [field for field in dataclasses.fields(cls) if field.init]  # type: ignore[arg-type]
    namespace: dict[str, Any] = {}
    signature, body = [], []
    for index, field in enumerate(fields):
        if field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{field.name} has a default_factory")
        if field.kw_only:
            raise TypeError(f"{cls.__name__}.{field.name} is keyword-only")
        namespace[f"_set{index}"] = cls.__dict__[field.name].__set__
        if field.default is dataclasses.MISSING:
            signature.append(field.name)
        else:
            namespace[f"_default{index}"] = field.default
            signature.append(f"{field.name}=_default{index}")
        body.append(f"    _set{index}(self, {field.name})")
    source = f"def __init__(self, {', '.join(signature)}):\n" + "\n".join(body) + "\n"
    # The source is built above from field names only.
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {field.name: field.type for field in fields}
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
