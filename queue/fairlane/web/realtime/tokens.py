"""Read-only tokens scoped to one run, tag or batch of one environment, for a browser.

A backend holding an environment key asks for one (``POST /api/v1/realtime-tokens``) and hands
it to a page, which follows that run, tag or batch (``GET .../events``) and reads that run
(``GET /api/v1/runs/{id}``) with it, and nothing else: any other route answers 401 (it is no
API key) and another run, tag or batch 403. The token is ``flrt_`` + its claims (base64url
JSON: environment, kind, target, expiry) + ``.`` + their HMAC-SHA256 under a secret the app
keeps in the database, so every server process of the database accepts it and none stores it.
Nothing revokes one before it expires (at most a day): a token reads, it never acts.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from fairlane.web.auth import sign, signature_matches, unauthorized
from fairlane.web.errors import ApiError
from fairlane.web.realtime.inbox import Scope

TOKEN_PREFIX = "flrt_"
TOKEN_SECRET = "realtime-tokens"
DEFAULT_LIFETIME_S = 3600.0
MAX_LIFETIME_S = 24 * 3600.0
MAX_TOKEN_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Issued:
    token: str
    expires_at: float  # seconds since the epoch


def lifetime(value: object) -> float:
    """A token's lifetime in seconds: given (1 s to a day) or the default hour; else 422."""
    if value is None:
        return DEFAULT_LIFETIME_S
    # An int is compared as it is: math.isfinite of one past a double's range raises.
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if isinstance(value, bool) or not isinstance(value, int | float) or not finite:
        raise ApiError(422, "BadRequest", "lifetime must be a number of seconds", field="lifetime")
    if not 1 <= value <= MAX_LIFETIME_S:
        raise ApiError(
            422,
            "BadRequest",
            f"lifetime must be 1 to {MAX_LIFETIME_S:.0f} seconds, not {value}",
            field="lifetime",
        )
    return float(value)


def issue(secret: bytes, scope: Scope, lifetime_s: float, now: float | None = None) -> Issued:
    assert scope.environment is not None, "a token is for one environment"
    expires = math.ceil((time.time() if now is None else now) + lifetime_s)
    claims = {"e": scope.environment, "k": scope.kind, "t": scope.target, "x": expires}
    body = base64.urlsafe_b64encode(json.dumps(claims, separators=(",", ":")).encode())
    message = body.decode().rstrip("=")
    return Issued(f"{TOKEN_PREFIX}{message}.{sign(secret, message)}", float(expires))


def is_token(presented: str) -> bool:
    return presented.startswith(TOKEN_PREFIX)


def verify(secret: bytes, presented: str, now: float | None = None) -> Scope:
    """The token's scope, or 401: malformed, forged or expired."""
    message, _, signature = presented.removeprefix(TOKEN_PREFIX).partition(".")
    well_formed = len(presented) <= MAX_TOKEN_CHARS and signature.isascii()
    if not well_formed or not signature_matches(secret, message, signature):
        raise unauthorized("the realtime token is not valid")
    claims = _claims(message)
    if claims["x"] <= (time.time() if now is None else now):
        raise unauthorized("the realtime token has expired")
    return Scope(claims["k"], claims["t"], claims["e"])


def _claims(message: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(message + "=" * (-len(message) % 4))
        claims = json.loads(raw)
    except (binascii.Error, ValueError):
        raise unauthorized("the realtime token is not valid") from None
    if not isinstance(claims, dict) or claims.get("k") not in ("run", "tag", "batch"):
        raise unauthorized("the realtime token is not valid")
    return claims
