"""Who is asking: bearer API keys for the JSON API, and what each key may see.

``Authorization: Bearer <key>``; no key, a malformed header, an unknown or a revoked key all
answer 401, saying which without echoing the key. An environment key sees its environment
only: another environment's runs, batches and tokens answer 404, exactly as ids that do not
exist, so a key cannot even learn that they do; a request that names another environment
outright (a trigger's ``environment`` option, a limits path) answers 403. An admin key sees
every environment and may change the scheduler's global settings.

Signatures (token callback URLs, dashboard sessions, CSRF tokens) are HMAC-SHA256 under a
secret the app keeps in the database (``WebState.secret``).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from starlette.requests import Request

from fairlane.models import ApiKey
from fairlane.web.errors import ApiError
from fairlane.web.keys import authenticate_async
from fairlane.web.state import WebState

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="fairlane"'}
CALLBACK_SECRET = "token-callbacks"


def state_of(request: Request) -> WebState:
    state: WebState = request.app.state.fairlane
    return state


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "Unauthorized", message, headers=CHALLENGE)


def presented_key(request: Request) -> str:
    header = request.headers.get("authorization")
    if header is None:
        raise unauthorized("an API key is required: send Authorization: Bearer <key>")
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise unauthorized("the Authorization header must be: Bearer <key>")
    return key


@dataclass(frozen=True, slots=True)
class Caller:
    """The key a request authenticated with, and what it may see."""

    key: ApiKey

    @property
    def is_admin(self) -> bool:
        return self.key.is_admin

    def sees(self, environment: str | None) -> bool:
        return self.key.is_admin or (
            environment is not None and environment == self.key.environment
        )

    def environment(self, requested: object | None, default: str = "default") -> str:
        """The environment a request acts in: the key's own, or (admin) the one named."""
        if self.key.is_admin:
            if requested is None:
                return default
            if not isinstance(requested, str):
                raise ApiError(
                    422, "TriggerOptionError", "environment must be a string", option="environment"
                )
            return requested
        own = self.key.environment
        assert own is not None
        if requested is not None and requested != own:
            raise forbidden_environment(requested)
        return own

    def check_environment(self, environment: str) -> None:
        """A path naming an environment: 403 unless the key may act in it."""
        if not self.sees(environment):
            raise forbidden_environment(environment)

    def require_admin(self) -> None:
        if not self.key.is_admin:
            raise ApiError(403, "Forbidden", "this needs an admin key")


def forbidden_environment(environment: object) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        "this key cannot act in another environment",
        environment=environment if isinstance(environment, str) else None,
    )


async def authenticate(request: Request) -> Caller:
    presented = presented_key(request)
    state = state_of(request)
    async with state.connection() as conn:
        key = await authenticate_async(conn, presented, schema=state.schema)
    if key is None:
        raise unauthorized("the API key is not valid (unknown or revoked)")
    return Caller(key)


# -- signatures ------------------------------------------------------------------------------


def sign(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def signature_matches(secret: bytes, message: str, presented: str) -> bool:
    return hmac.compare_digest(sign(secret, message), presented)


async def callback_signature(state: WebState, token_id: int) -> str:
    return sign(await state.secret(CALLBACK_SECRET), f"token:{token_id}")
