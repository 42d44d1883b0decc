"""What an error means to a caller outside Python: the ``fairlane`` command's exit code and the
HTTP API's status, both read from one table by the error's category (``fairlane.errors``).

The exit codes are documented (README, Command line): 0 ok, 1 an operational error (the
database unreachable, a failed statement, a limit that refused the call), 2 a usage error (bad
arguments, a value out of range, something in the wrong state), 3 something named that does
not exist, 4 the schema is not migrated or not this fairlane's.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairlane import errors as e

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_SCHEMA = 4


@dataclass(frozen=True, slots=True)
class Policy:
    exit_code: int
    http_status: int


POLICIES: dict[type[e.FairlaneError], Policy] = {
    e.InputError: Policy(EXIT_USAGE, 422),
    e.NotFoundError: Policy(EXIT_NOT_FOUND, 404),
    e.ConflictError: Policy(EXIT_USAGE, 409),
    e.LimitExceededError: Policy(EXIT_ERROR, 429),
    e.TimedOutError: Policy(EXIT_ERROR, 408),
    e.UnavailableError: Policy(EXIT_ERROR, 503),
    e.SchemaError: Policy(EXIT_SCHEMA, 503),
    e.RunError: Policy(EXIT_ERROR, 500),
}

# A FairlaneError of no category (the base itself, or a subclass outside fairlane) is a fault,
# not something the caller can fix; anything else a command ends with is operational.
UNCLASSIFIED = Policy(EXIT_ERROR, 500)


def category(kind: type[BaseException]) -> type[e.FairlaneError] | None:
    """The category base an error class inherits, or None for one of no category."""
    found = [base for base in e.CATEGORIES if issubclass(kind, base)]
    return found[0] if len(found) == 1 else None


def policy(error: BaseException) -> Policy:
    base = category(type(error))
    return UNCLASSIFIED if base is None else POLICIES[base]


def exit_code(error: BaseException) -> int:
    """The documented exit code of an error a command ended with."""
    return policy(error).exit_code


def http_status(error: e.FairlaneError) -> int:
    return policy(error).http_status
