"""fairlane.web: the HTTP API and the dashboard, an ASGI app on Starlette (the ``web`` extra:
``pip install fairlane[web]``).

``create_app(dsn, schema)`` returns the app; ``fairlane serve`` runs it with uvicorn, and it
mounts inside a FastAPI or Starlette app (``Mount("/fairlane", app=create_app())``). API keys
(``fairlane.web.keys``, ``fairlane keys``) need no web extra: importing this package does not
import Starlette until ``create_app`` is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fairlane.web.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from fairlane.web.app import create_app

        return create_app
    raise AttributeError(f"module 'fairlane.web' has no attribute {name!r}")
