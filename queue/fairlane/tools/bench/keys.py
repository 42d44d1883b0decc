"""keys: one hot concurrency key and many light ones in one queue, at a limit per key.

``--hot`` runs (20,000) of the key ``hot`` are queued first, then ``--light-keys`` keys (100)
of ``--light`` runs each (10), all in the queue ``default`` of one environment whose
``concurrency_limit`` is ``--limit`` (2) per key (sql/claim/keys.sql). One worker
(``--concurrency`` 100, a handler that sleeps ``--sleep-ms``) starts once everything is queued.

* ``light_done_s``: when each light key's last run returned, from the worker's start, sorted
  (the issue's figure: every light key done within 1 s of the start);
* ``light_done_max_s``, ``light_done_p50_s``: the same, summed up;
* ``hot_done_when_light_done``: the hot key's runs returned by then (at most ``--limit`` at a
  time, whatever its backlog).

The worker is stopped once the light keys are done: the hot key's backlog is not drained.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Any

import anyio
import psycopg

from fairlane import AsyncClient
from fairlane.limits import set_queue
from fairlane.tools.bench.common import SCHEMA, emit, fresh_database, run_async, server_url
from fairlane.tools.bench.drain import TIMEOUT_S
from fairlane.tools.bench.enqueue import BATCH, open_client
from fairlane.triggering.request import TriggerRequest
from fairlane.worker import RunContext, TaskRegistry, Worker
from fairlane.worker.process import loop_name

TASK = "keyed"
HOT = "hot"


class Finishes:
    """Per key: runs returned, and when its last one returned."""

    def __init__(self, light_keys: int, light: int) -> None:
        self.light_left = light_keys * light
        self.done_count: Counter[str] = Counter()
        self.last: dict[str, float] = {}
        self.all_light = anyio.Event()

    def end(self, key: str) -> None:
        self.done_count[key] += 1
        self.last[key] = time.perf_counter()
        if key != HOT:
            self.light_left -= 1
            if self.light_left == 0:
                self.all_light.set()


async def trigger_keys(client: AsyncClient, args: argparse.Namespace) -> None:
    keys = [HOT] * args.hot + [
        f"light-{k:03d}" for k in range(args.light_keys) for _ in range(args.light)
    ]
    for offset in range(0, len(keys), BATCH):
        await client.trigger_many(
            [
                TriggerRequest(TASK, key, concurrency_key=key)
                for key in keys[offset : offset + BATCH]
            ]
        )


async def _keys(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    finishes = Finishes(args.light_keys, args.light)
    sleep_s = args.sleep_ms / 1000
    tasks = TaskRegistry()

    @tasks.task(TASK)
    async def handler(ctx: RunContext, key: str) -> None:
        await anyio.sleep(sleep_s)
        finishes.end(key)

    client = await open_client(dsn)
    async with client:
        await trigger_keys(client, args)
    worker = Worker(tasks, dsn, schema=SCHEMA, concurrency=args.concurrency, shutdown_grace=5.0)
    async with anyio.create_task_group() as group:
        started = time.perf_counter()
        await group.start(worker.run)
        with anyio.fail_after(TIMEOUT_S):
            await finishes.all_light.wait()
        worker.stop()
    done = sorted(round(at - started, 3) for key, at in finishes.last.items() if key != HOT)
    return {
        "light_done_s": done,
        "light_done_max_s": done[-1] if done else None,
        "light_done_p50_s": statistics.median(done) if done else None,
        "hot_done_when_light_done": finishes.done_count[HOT],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "keys", keep=args.keep_db) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            set_queue(conn, "default", "default", concurrency_limit=args.limit, schema=SCHEMA)
        figures = run_async(_keys, dsn, args, loop=args.loop)
    return {
        "scenario": "keys",
        "loop": loop_name(args.loop),
        "hot": args.hot,
        "light_keys": args.light_keys,
        "light": args.light,
        "limit_per_key": args.limit,
        "concurrency": args.concurrency,
        "sleep_ms": args.sleep_ms,
        **figures,
        "ok": len(figures["light_done_s"]) == args.light_keys,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "keys", parents=[common], help="one hot concurrency key and 100 light ones"
    )
    p.add_argument("--hot", type=int, default=20000, help="runs of the hot key")
    p.add_argument("--light-keys", type=int, default=100, help="light keys")
    p.add_argument("--light", type=int, default=10, help="runs of each light key")
    p.add_argument("--limit", type=int, default=2, help="the queue's concurrency limit per key")
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--sleep-ms", type=float, default=2.0, help="handler sleep (async)")
    p.set_defaults(func=main)
