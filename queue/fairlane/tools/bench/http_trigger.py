"""http-trigger: the latency of ``POST /api/v1/tasks/{task}/trigger`` over loopback.

``fairlane serve`` runs as a process of its own on a free loopback port; one httpx client with
a keep-alive connection and an environment's API key sends ``--requests`` triggers one after
the other (after ``--warmup`` discarded ones). Each is timed from sending the request to
reading the answer, so the figure is the key's lookup, the trigger statement and its commit,
and the HTTP round trip. Prints the percentiles in ms and the requests per second.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from fairlane.tools.bench.common import (
    count_statuses,
    emit,
    fresh_database,
    latency_figures,
    server_url,
)
from fairlane.tools.bench.server import api_key, httpx_module, serve

TASK = "bench.noop"
ENVIRONMENT = "bench"


def timed_triggers(url: str, key: str, requests: int, warmup: int) -> list[float]:
    """Seconds per request, warm-up excluded; every answer must be 200."""
    httpx = httpx_module()
    headers = {"Authorization": f"Bearer {key}"}
    endpoint = f"{url}/api/v1/tasks/{TASK}/trigger"
    seconds: list[float] = []
    with httpx.Client(headers=headers, timeout=30.0) as client:
        for n in range(warmup + requests):
            started = time.perf_counter()
            answer = client.post(endpoint, json={"payload": {"n": n}})
            elapsed = time.perf_counter() - started
            if answer.status_code != 200:
                raise SystemExit(f"trigger {n} answered {answer.status_code}: {answer.text}")
            if n >= warmup:
                seconds.append(elapsed)
    return seconds


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "http_trigger", keep=args.keep_db) as dsn:
        key = api_key(dsn, ENVIRONMENT)
        with serve(dsn, pool_size=args.pool_size) as server:
            started = time.perf_counter()
            seconds = timed_triggers(server.url, key, args.requests, args.warmup)
            wall = time.perf_counter() - started
        with psycopg.connect(dsn, autocommit=True) as conn:
            queued = count_statuses(conn).get("QUEUED", 0)
    ms = [s * 1000 for s in seconds]
    return {
        "scenario": "http-trigger",
        "requests": len(ms),
        "warmup": args.warmup,
        **latency_figures(ms, (50, 90, 99), 3),
        "requests_per_s": round((args.warmup + len(ms)) / wall),
        "ok": queued == args.warmup + args.requests,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "http-trigger",
        parents=[common],
        help="POST /api/v1/tasks/{task}/trigger one after the other over loopback: latency",
    )
    p.add_argument("--requests", type=int, default=2000, help="timed requests")
    p.add_argument("--warmup", type=int, default=100, help="requests sent first, not timed")
    p.add_argument("--pool-size", type=int, default=4, help="the server's database connections")
    p.set_defaults(func=main)
