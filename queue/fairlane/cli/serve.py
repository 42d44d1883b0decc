"""``fairlane serve``: the HTTP API and dashboard (fairlane.web) under uvicorn.

uvicorn's own access log is off: the app logs each request itself (``fairlane.web.access``),
with token callback signatures masked and never a header, so no key reaches a log.
"""

from __future__ import annotations

import argparse
from typing import Any

from fairlane.cli.common import connection_options
from fairlane.durations import parse_duration_string
from fairlane.errors import InvalidDurationError


def _idle(text: str) -> float:
    try:
        value = parse_duration_string("--session-idle", text)
    except InvalidDurationError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 900, 15m, 1h)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 second, not {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a positive number of seconds, not {text!r}")
    return value


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"an integer of at least 1, not {text!r}")
    return int(text)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from fairlane.web.app import create_app
        from fairlane.web.realtime.settings import StreamSettings
    except ModuleNotFoundError as missing:
        raise SystemExit(
            f"fairlane serve needs the web extra ({missing.name} is missing): "
            "pip install 'fairlane[web]'"
        ) from None
    app = create_app(
        args.dsn,
        args.schema,
        pool_size=args.pool_size,
        max_body_bytes=args.max_body_bytes,
        session_idle=args.session_idle,
        upload_idle_timeout=args.upload_idle_timeout,
        uploads_per_environment=args.uploads_per_environment,
        streams=StreamSettings(
            per_environment=args.streams_per_environment, total=args.max_streams
        ),
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        access_log=False,
        log_level=args.log_level,
        proxy_headers=args.proxy_headers,
        forwarded_allow_ips=args.forwarded_allow_ips,
        # Open event streams and uploads would hold a graceful shutdown for as long as their
        # clients stay: past this they are cut (an EventSource reconnects elsewhere, an upload
        # keeps what it stored).
        timeout_graceful_shutdown=args.shutdown_timeout,
    )
    return 0


def add_parser(commands: Any) -> None:
    p = commands.add_parser("serve", help="run the HTTP API and dashboard (needs fairlane[web])")
    connection_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--pool-size", type=int, default=10, help="most database connections")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest JSON request body (default 8 MiB); NDJSON batch items are streamed",
    )
    p.add_argument(
        "--session-idle",
        type=_idle,
        default=None,
        metavar="DURATION",
        help="a dashboard session unused this long has ended (default 30m): seconds or a"
        " duration such as 900, 15m, 1h",
    )
    p.add_argument(
        "--upload-idle-timeout",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="end an NDJSON upload that sends nothing for this long, keeping what it stored "
        "(default 30)",
    )
    p.add_argument(
        "--uploads-per-environment",
        type=_at_least_one,
        default=None,
        metavar="N",
        help="most concurrent NDJSON uploads per environment; the next answers 429 (default 4)",
    )
    p.add_argument(
        "--max-streams",
        type=_at_least_one,
        default=None,
        metavar="N",
        help="most open event streams (Server-Sent Events) in this server; the next answers 429"
        " (default 5000)",
    )
    p.add_argument(
        "--streams-per-environment",
        type=_at_least_one,
        default=None,
        metavar="N",
        help="most open event streams of one environment; the next answers 429 (default 1000)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=_positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM, end open requests (event streams, uploads) after this long (default 10)",
    )
    p.add_argument("--log-level", default="info")
    p.add_argument("--proxy-headers", action="store_true", help="trust X-Forwarded-* headers")
    p.add_argument("--forwarded-allow-ips", default=None)
    p.set_defaults(func=cmd_serve)
