"""Security headers on every response of the app (the dashboard's pages above all).

The Content-Security-Policy allows the app's own origin only: the dashboard's script and
stylesheet are files of ``dashboard/static`` (no inline script, no inline style: a bar's
width is a class of the stylesheet, not a ``style`` attribute), its live fragments are
fetched from the same origin, and its forms post to it. No page may be framed (against
clickjacking: ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` for older browsers),
no URL of the dashboard goes to another origin in a Referer (the same origin still gets
one: a form sends its user back to the page it was on), and no response is sniffed into
another type. A header a response already has is left as it is.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
)


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in HEADERS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)
