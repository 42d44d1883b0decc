"""Waitpoints: what a run waits on. A handler waits through its ``RunContext``
(``trigger_and_wait``, ``batch_trigger_and_wait``, ``wait_for_runs``, ``wait_for_batch``,
``wait_until``, ``wait_for_token``) and gets ``WaitResult``s; tokens are made and completed by
any code (``tokens``)."""

from fairlane.waitpoints.results import WaitResult
from fairlane.waitpoints.tokens import (
    complete_token,
    complete_token_async,
    create_token,
    create_token_async,
    get_token,
    get_token_async,
)

__all__ = [
    "WaitResult",
    "complete_token",
    "complete_token_async",
    "create_token",
    "create_token_async",
    "get_token",
    "get_token_async",
]
