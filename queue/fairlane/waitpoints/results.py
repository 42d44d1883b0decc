"""What a wait returns: how each waitpoint completed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class WaitResult:
    """How a waitpoint completed: ``ok`` with ``output``, or an ``error`` the waiter inspects.

    For a run, ``output`` is its result; ``error`` holds its final ``status`` (FAILED, CRASHED,
    TIMED_OUT, EXPIRED, CANCELED, SYSTEM_FAILURE) and the stored error. For a token that timed
    out, ``error["code"]`` is ``WAITPOINT_TIMEOUT``.
    """

    ok: bool
    output: Any = None
    error: dict[str, Any] | None = None
    run_id: int | None = None

    @classmethod
    def from_row(cls, is_error: bool, output: Any, run_id: int | None) -> WaitResult:
        if is_error:
            error = output if isinstance(output, dict) else {"message": str(output)}
            return cls(ok=False, error=error, run_id=run_id)
        return cls(ok=True, output=output, run_id=run_id)
