"""``fairlane batch ingest FILE.ndjson --env E`` and ``fairlane batch show ID``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

import anyio

from fairlane.batches.client import AsyncBatchClient
from fairlane.batches.ingest import count_items
from fairlane.cli.common import connection_options
from fairlane.models import Batch, IngestResult


def _common(parser: argparse.ArgumentParser) -> None:
    connection_options(parser)


def summary(batch: Batch) -> dict[str, Any]:
    return {
        "id": batch.id,
        "environment": batch.environment,
        "status": batch.status,
        "sealed": batch.sealed,
        "run_count": batch.run_count,
        "received": batch.received,
        "succeeded": batch.succeeded,
        "failed": batch.failed,
        "outcome": batch.outcome,
        "runs": asdict(batch.runs),
        "parent_run_id": batch.parent_run_id,
        "created_at": batch.created_at.isoformat(),
        "sealed_at": batch.sealed_at.isoformat() if batch.sealed_at else None,
        "completed_at": batch.completed_at.isoformat() if batch.completed_at else None,
        "error": batch.error,
    }


class ProgressBar:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, width: int = 40) -> None:
        self.total = max(total, 1)
        self.width = width

    def __call__(self, state: IngestResult) -> None:
        done = min(state.received, self.total)
        filled = self.width * done // self.total
        bar = "#" * filled + "-" * (self.width - filled)
        sys.stderr.write(f"\r[{bar}] {done}/{self.total} items")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


async def _ingest(args: argparse.Namespace) -> int:
    run_count = args.count or count_items(args.file)
    async with AsyncBatchClient(args.dsn, schema=args.schema) as batches:
        if args.batch is not None:
            batch = await batches.get(args.batch)
        else:
            batch = await batches.create(args.env, run_count, idempotency_key=args.idempotency_key)
        bar = ProgressBar(batch.run_count)
        try:
            await batches.ingest_file(
                batch.id, args.file, progress=bar, first_index=args.first_index
            )
        finally:
            bar.close()
        print(json.dumps(summary(await batches.get(batch.id))))
    return 0


async def _show(args: argparse.Namespace) -> int:
    async with AsyncBatchClient(args.dsn, schema=args.schema) as batches:
        shown = summary(await batches.get(args.id))
        if args.items:
            shown["items"] = [asdict(item) for item in await batches.items(args.id)]
        print(json.dumps(shown, indent=2))
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    return anyio.run(_ingest, args)


def cmd_show(args: argparse.Namespace) -> int:
    return anyio.run(_show, args)


def add_parser(commands: Any) -> None:
    batch = commands.add_parser("batch", help="batch triggers: ingest an NDJSON file, show one")
    actions = batch.add_subparsers(dest="batch_command", required=True)
    p = actions.add_parser("ingest", help="create a batch and stream an NDJSON file into it")
    _common(p)
    p.add_argument(
        "file",
        help="NDJSON: one item per line, {task, payload, options, index}; an item without an "
        "index takes --first-index plus its position among the file's items",
    )
    p.add_argument(
        "--environment", "--env", dest="env", default="default", help="the batch's environment"
    )
    p.add_argument("--count", type=int, help="run count (default: the file's non-blank lines)")
    p.add_argument("--batch", type=int, help="resend into this existing batch instead")
    p.add_argument(
        "--first-index",
        type=int,
        default=0,
        metavar="N",
        help="the index of the file's first item without one (default 0): a file holding the "
        "rest of a stream from its N-th item, without indexes, resends with --first-index N",
    )
    p.add_argument("--idempotency-key", help="a second ingest with this key reuses the batch")
    p.set_defaults(func=cmd_ingest)
    p = actions.add_parser("show", help="a batch's status and counts")
    _common(p)
    p.add_argument("id", type=int)
    p.add_argument("--items", action="store_true", help="list every item with its run")
    p.set_defaults(func=cmd_show)
