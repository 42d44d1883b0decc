"""fairlane.frozen.fast_init: the faster __init__ builds the same instance as the dataclass's
own, keeps it frozen, and refuses classes it would build wrongly."""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from fairlane.frozen import fast_init
from fairlane.models import ClaimedRun
from fairlane.triggering.debounce import Debounce
from fairlane.triggering.request import TriggerRequest


@dataclass(frozen=True, slots=True)
class Plain:
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()


@fast_init
@dataclass(frozen=True, slots=True)
class Fast:
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a",), {}), (("a", 2), {}), (("a",), {"tags": ("x",)}), ((), {"name": "b", "count": 3})],
)
def test_it_sets_what_the_dataclass_init_sets(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    plain, fast = Plain(*args, **kwargs), Fast(*args, **kwargs)  # type: ignore[arg-type]
    assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
    assert repr(fast).removeprefix("Fast") == repr(plain).removeprefix("Plain")


def test_the_instance_stays_frozen_and_replaceable() -> None:
    request = TriggerRequest("send", {"to": "a"}, queue="mail", delay=timedelta(seconds=5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.task = "other"  # type: ignore[misc]
    changed = dataclasses.replace(request, priority=3)
    assert (changed.task, changed.queue, changed.priority, changed.delay) == (
        "send",
        "mail",
        3,
        timedelta(seconds=5),
    )
    assert request == TriggerRequest("send", {"to": "a"}, queue="mail", delay=timedelta(seconds=5))
    assert request.debounce is None
    assert TriggerRequest("t", debounce=Debounce("k", 1.0)).keyed


def test_a_claimed_run_is_still_a_frozen_dataclass() -> None:
    token = uuid.uuid4()
    values: tuple[Any, ...] = (7, token, "send", {"to": "a"}, 1, 3, "default", "mail", {}, None, 2)
    run = ClaimedRun(*values)
    assert dataclasses.astuple(run) == (*values, None, None, False)
    assert run == ClaimedRun(
        id=7,
        lease_token=token,
        task="send",
        payload={"to": "a"},
        attempt=1,
        max_attempts=3,
        environment="default",
        queue="mail",
        metadata={},
        machine=None,
        max_duration_s=2,
    )
    assert dataclasses.replace(run, attempt=2).attempt == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.attempt = 2  # type: ignore[misc]


def test_it_keeps_the_signature() -> None:
    parameters = inspect.signature(TriggerRequest).parameters
    assert list(parameters) == [f.name for f in dataclasses.fields(TriggerRequest)]
    assert parameters["queue"].default == "default"
    assert parameters["environment"].default is None  # "default", or a child's parent's
    assert parameters["task"].default is inspect.Parameter.empty
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'task'"):
        TriggerRequest()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'queues'"):
        TriggerRequest("t", queues="q")  # type: ignore[call-arg]


def test_it_refuses_what_it_would_build_wrongly() -> None:
    @dataclass(frozen=True)
    class Unslotted:
        name: str

    @dataclass(slots=True)
    class Thawed:
        name: str

    @dataclass(frozen=True, slots=True)
    class Factory:
        items: list[int] = field(default_factory=list)

    @dataclass(frozen=True, slots=True)
    class PostInit:
        name: str

        def __post_init__(self) -> None:
            pass

    for cls, complaint in (
        (Unslotted, "not a frozen dataclass with slots"),
        (Thawed, "not a frozen dataclass with slots"),
        (Factory, "default_factory"),
        (PostInit, "__post_init__"),
    ):
        with pytest.raises(TypeError, match=complaint):
            fast_init(cls)
