"""The task sets of two releases for the rolling deploy test (tests/worker/test_rolling_deploy.py):
the old release handles ``deploy.a``, the new one ``deploy.a`` and ``deploy.b``. Each execution
of a handler writes a row to the test's ledger table, at the DSN in ``FAIRLANE_DEPLOY_LEDGER``,
so that the test counts executions, not only final statuses."""

from __future__ import annotations

import os
from typing import Any

import psycopg

from fairlane import RunContext, TaskRegistry

LEDGER_DSN_VARIABLE = "FAIRLANE_DEPLOY_LEDGER"
LEDGER_TABLE = """
CREATE TABLE deploy_ledger (
    run_id bigint NOT NULL,
    attempt integer NOT NULL,
    task text NOT NULL,
    worker_pid integer NOT NULL
)
"""

old_tasks = TaskRegistry()
new_tasks = TaskRegistry()


async def record(ctx: RunContext) -> int:
    async with await psycopg.AsyncConnection.connect(
        os.environ[LEDGER_DSN_VARIABLE], autocommit=True
    ) as conn:
        await conn.execute(
            "INSERT INTO deploy_ledger (run_id, attempt, task, worker_pid) VALUES (%s, %s, %s, %s)",
            (ctx.run_id, ctx.attempt, ctx.task, os.getpid()),
        )
    return os.getpid()


@old_tasks.task("deploy.a")
async def old_a(ctx: RunContext, payload: Any) -> int:
    return await record(ctx)


@new_tasks.task("deploy.a")
async def new_a(ctx: RunContext, payload: Any) -> int:
    return await record(ctx)


@new_tasks.task("deploy.b")
async def new_b(ctx: RunContext, payload: Any) -> int:
    return await record(ctx)
