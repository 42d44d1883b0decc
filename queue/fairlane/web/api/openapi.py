"""The OpenAPI 3.1 document of /api/v1, written by hand (``GET /api/v1/openapi.json``).

tests/web/test_api_resources.py holds it to the routes: every route is documented and every
documented path is a route. It states the ranges requests are held to, so that
tests/web/test_openapi_fuzz.py generates requests within and around them.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fairlane.durations import MAX_SECONDS
from fairlane.limits import (
    MAX_BURST_FACTOR,
    MAX_RATE,
    MAX_RATE_PERIOD_S,
    MIN_RATE_PERIOD_S,
)
from fairlane.models import RunStatus
from fairlane.schema.tables import BATCH_ITEM_STATES, BATCH_STATUSES
from fairlane.web.urls import app_url

JSON = "application/json"


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def body(schema: dict[str, Any], *, required: bool = True, media: str = JSON) -> dict[str, Any]:
    return {"required": required, "content": {media: {"schema": schema}}}


def answers(ok: int, schema: dict[str, Any], *errors: int) -> dict[str, Any]:
    described = {
        400: "malformed request",
        401: "no key, or a bad or revoked one",
        403: "the key may not act there",
        404: "not found, or not the key's environment's",
        408: "the upload sent nothing for the idle timeout; what came before it is stored",
        409: "the run or batch is not in a state that allows it",
        413: "the JSON body is over the size bound",
        422: "a value was refused (the error names the option, item or line)",
        429: "a size limit, the batch token bucket, the environment's upload cap or a cap on "
        "open event streams refused it (Retry-After when known)",
    }
    documented: dict[str, Any] = {
        str(ok): {"description": "OK", "content": {JSON: {"schema": schema}}}
    }
    for status in (401, *errors):
        documented[str(status)] = {
            "description": described[status],
            "content": {JSON: {"schema": ref("Error")}},
        }
    return documented


def operation(
    summary: str,
    ok_schema: dict[str, Any],
    *errors: int,
    ok: int = 200,
    request_body: dict[str, Any] | None = None,
    parameters: list[dict[str, Any]] | None = None,
    secured: bool = True,
    tag: str,
) -> dict[str, Any]:
    documented: dict[str, Any] = {
        "summary": summary,
        "tags": [tag],
        "responses": answers(ok, ok_schema, *errors),
    }
    if request_body is not None:
        documented["requestBody"] = request_body
    if parameters:
        documented["parameters"] = parameters
    if not secured:
        documented["security"] = []
        documented["responses"].pop("401", None)
    return documented


def path_param(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def query(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "in": "query", "schema": schema}
    if description:
        found["description"] = description
    return found


# The ranges requests are held to (the columns'): a value outside answers 4xx.
INT32 = {"type": "integer", "format": "int32", "minimum": -(2**31), "maximum": 2**31 - 1}
COUNT = {**INT32, "minimum": 0}
ID = {"type": "integer", "format": "int64", "minimum": 1, "maximum": 2**63 - 1}
TEXT = {"type": "string"}
DURATION = {
    "oneOf": [{"type": "number", "minimum": 0, "maximum": MAX_SECONDS}, {"type": "string"}],
    "description": 'seconds, or a duration such as "500ms", "90s", "2h30m", "1d"',
}
NULLABLE_INT = {**COUNT, "type": ["integer", "null"]}
BURST_FACTOR = {"type": "number", "minimum": 1, "maximum": MAX_BURST_FACTOR}
RATE = {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": MAX_RATE}
RATE_BURST = {"type": ["number", "null"], "minimum": 0, "maximum": MAX_RATE}
# A queue's rate per concurrency key (fairlane.limits.set_queue): set whole.
QUEUE_RATE: dict[str, Any] = {
    "rate_limit": {**NULLABLE_INT, "minimum": 1},
    "rate_period_s": {
        "type": ["number", "null"],
        "minimum": MIN_RATE_PERIOD_S,
        "maximum": MAX_RATE_PERIOD_S,
    },
    "rate_burst": {**NULLABLE_INT, "minimum": 1},
}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {
                    "type": {"type": "string"},
                    "message": {"type": "string"},
                    "option": {"type": "string"},
                    "index": {"type": "integer"},
                    "line": {"type": "integer"},
                    "field": {
                        "type": "string",
                        "description": "the body's value refused, by "
                        "path (options.priority, items[2].payload)",
                    },
                    "parameter": {
                        "type": "string",
                        "description": "the path or query value refused",
                    },
                    "setting": {"type": "string"},
                },
                "additionalProperties": True,
            }
        },
    },
    "TriggerOptions": {
        "type": "object",
        "additionalProperties": False,
        "description": "Python names or the seeds' camelCase names (maxAttempts, "
        "idempotencyKey, idempotencyKeyTTL, maxDuration, parentRunId).",
        "properties": {
            "environment": {
                "type": "string",
                "description": "an admin key only; an environment key triggers in its own",
            },
            "queue": {
                "oneOf": [
                    {"type": "string"},
                    {"type": "object", "properties": {"name": {"type": "string"}}},
                ]
            },
            "priority": {**INT32, "description": "a head start in seconds"},
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 250},
            "delay": {"oneOf": [DURATION, {"type": "string", "format": "date-time"}]},
            "ttl": DURATION,
            "max_duration": DURATION,
            "tags": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            "metadata": {"type": "object"},
            "machine": {"type": "string"},
            "idempotency_key": {"type": "string"},
            "idempotency_scope": {"enum": ["run", "attempt", "global"]},
            "idempotency_ttl": DURATION,
            "parent_run_id": ID,
            "parent_attempt": ID,
            "debounce": {
                "type": "object",
                "required": ["key", "delay"],
                "properties": {
                    "key": {"type": "string"},
                    "delay": DURATION,
                    "mode": {"enum": ["leading", "trailing"]},
                    "max_delay": DURATION,
                },
            },
        },
    },
    "TriggerBody": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"payload": {}, "options": ref("TriggerOptions")},
    },
    "TriggerManyBody": {
        "type": "object",
        "required": ["items"],
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["task"],
                    "additionalProperties": False,
                    "properties": {
                        "task": {"type": "string"},
                        "payload": {},
                        "options": ref("TriggerOptions"),
                    },
                },
            }
        },
    },
    "Run": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "environment": {"type": "string"},
            "queue": {"type": "string"},
            "task": {"type": "string"},
            "status": {"enum": [status.value for status in RunStatus]},
            "is_final": {"type": "boolean"},
            "payload": {},
            "result": {"description": "what the handler returned (null until it completed)"},
            "output": {
                "deprecated": True,
                "description": "the result under its earlier name; removed in the next release",
            },
            "error": {"type": ["object", "null"]},
            "priority": {"type": "integer"},
            "attempts": {"type": "integer"},
            "max_attempts": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "metadata": {"type": "object"},
            "machine": {"type": ["string", "null"]},
            "parent_run_id": {"type": ["integer", "null"]},
            "created_at": {"type": "string", "format": "date-time"},
            "started_at": {"type": ["string", "null"], "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
        },
    },
    "RunPage": {
        "type": "object",
        "properties": {
            "data": {"type": "array", "items": ref("Run")},
            "next_before_id": {"type": ["integer", "null"]},
        },
    },
    "BulkResult": {
        "type": "object",
        "description": "dry_run: matching and before_id; else matched, changed and why the "
        "others were left alone (their status, or QUEUE_FULL)",
        "properties": {
            "matching": {"type": "integer"},
            "before_id": {"type": ["integer", "null"]},
            "matched": {"type": "integer"},
            "changed": {"type": "integer"},
            "unchanged": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    },
    "CancelResult": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "canceled": {"type": "boolean"},
            "status": {"type": "string"},
            "previous_status": {"type": "string"},
            "descendants_canceled": {"type": "integer"},
        },
    },
    "Token": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "environment": {"type": ["string", "null"]},
            "status": {"enum": ["PENDING", "COMPLETED"]},
            "is_error": {"type": "boolean"},
            "output": {},
            "callback_url": {"type": "string", "format": "uri"},
            "timeout_at": {"type": ["string", "null"], "format": "date-time"},
        },
    },
    "Batch": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "environment": {"type": "string"},
            "run_count": {"type": "integer"},
            "received": {"type": "integer"},
            "status": {"enum": list(BATCH_STATUSES)},
            "sealed": {"type": "boolean"},
            "done": {"type": "boolean"},
            "succeeded": {"type": "integer", "description": "items that became runs"},
            "failed": {"type": "integer", "description": "items that could not become runs"},
            "outcome": {
                "enum": ["RUNNING", "SUCCEEDED", "FAILED"],
                "description": "how the batch's runs ended: RUNNING until each item's run ended",
            },
            "runs": {
                "type": "object",
                "description": "the batch's runs by outcome, and the items with no run yet",
                "properties": {
                    name: {"type": "integer"}
                    for name in (
                        "succeeded",
                        "failed",
                        "canceled",
                        "running",
                        "queued",
                        "not_yet_runs",
                    )
                },
            },
        },
    },
    "IngestResult": {
        "type": "object",
        "properties": {
            "batch_id": {"type": "integer"},
            "accepted": {"type": "integer"},
            "oversized": {"type": "integer"},
            "received": {"type": "integer"},
            "run_count": {"type": "integer"},
            "sealed": {"type": "boolean"},
            "status": {"type": "string"},
            "lines": {"type": "integer"},
        },
    },
    "BatchItemPage": {
        "type": "object",
        "properties": {
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "index": {"type": "integer"},
                        "state": {"enum": list(BATCH_ITEM_STATES)},
                        "run_id": {"type": ["integer", "null"]},
                        "error": {"type": ["object", "null"]},
                    },
                },
            },
            "next_after_index": {"type": ["integer", "null"]},
        },
    },
    "EnvironmentLimits": {
        "type": "object",
        "properties": {
            "environment": {"type": "string"},
            "concurrency_limit": NULLABLE_INT,
            "burst_factor": BURST_FACTOR,
            "cap": NULLABLE_INT,
            "size_limit": NULLABLE_INT,
            "paused": {"type": "boolean"},
        },
    },
    "QueueLimits": {
        "type": "object",
        "properties": {
            "environment": {"type": "string"},
            "queue": {"type": "string"},
            "concurrency_limit": NULLABLE_INT,
            "size_limit": NULLABLE_INT,
            "total_limit": NULLABLE_INT,
            **QUEUE_RATE,
            "paused": {"type": "boolean"},
        },
    },
    "QueueKeys": {
        "type": "object",
        "properties": {
            "keys": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "concurrency_key": {"type": "string"},
                        "running": COUNT,
                        "queued": COUNT,
                    },
                },
            }
        },
    },
    "Scheduler": {
        "type": "object",
        "properties": {
            "quantum": {**COUNT, "minimum": 1},
            "max_deficit": COUNT,
            "global_concurrency_limit": NULLABLE_INT,
            "rate_limit_per_s": RATE,
            "rate_burst": RATE_BURST,
        },
    },
    "Worker": {
        "type": "object",
        "properties": {
            "id": TEXT,
            "host": TEXT,
            "pid": {"type": "integer"},
            "version": TEXT,
            "tasks": {"type": "array", "items": TEXT},
            "environments": {"type": ["array", "null"], "items": TEXT},
            "queues": {"type": ["array", "null"], "items": TEXT},
            "concurrency": {"type": "integer"},
            "live": {"type": "boolean"},
            "stopping": {"type": "boolean"},
            "started_at": {"type": "string", "format": "date-time"},
            "last_seen_at": {"type": "string", "format": "date-time"},
        },
    },
    "UnservedTask": {
        "type": "object",
        "properties": {
            "environment": TEXT,
            "task": TEXT,
            "queues": {"type": "array", "items": TEXT},
            "runs": {"type": "integer"},
            "oldest_queued_at": {"type": "string", "format": "date-time"},
        },
    },
    "Workers": {
        "type": "object",
        "properties": {
            "workers": {"type": "array", "items": ref("Worker")},
            "unserved_tasks": {"type": "array", "items": ref("UnservedTask")},
        },
    },
    "LimitsOverview": {
        "type": "object",
        "properties": {
            "queues": {"type": "array", "items": {"type": "object"}},
            "scheduler": ref("Scheduler"),
        },
    },
}

ENV_PATH = [path_param("environment", TEXT)]
QUEUE_PATH = [path_param("environment", TEXT), path_param("queue", TEXT)]
ENV_LIMITS_BODY = body(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "concurrency_limit": NULLABLE_INT,
            "burst_factor": BURST_FACTOR,
            "size_limit": NULLABLE_INT,
            "paused": {"type": "boolean"},
        },
    }
)
QUEUE_LIMITS_BODY = body(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "concurrency_limit": NULLABLE_INT,
            "size_limit": NULLABLE_INT,
            "total_limit": NULLABLE_INT,
            **QUEUE_RATE,
            "paused": {"type": "boolean"},
        },
    }
)
ID_PATH = [path_param("id", ID)]
RUN_FILTERS = [
    query("environment", {"type": "string"}),
    query("queue", {"type": "string"}),
    query("task", {"type": "string"}),
    query("status", {"type": "string"}, "a status; repeat or comma-separate"),
    query("tag", {"type": "string"}, "runs with every tag given (repeat)"),
    query("batch_id", ID, "the runs this batch's items made"),
    query(
        "idempotency_key",
        {"type": "string"},
        "runs triggered with this key (without a parent run), or with this stored key",
    ),
]
BOOLEAN = {"type": "boolean"}


def bulk_operation(summary: str) -> dict[str, Any]:
    """A bulk action over the list's filters (fairlane.web.api.bulk)."""
    return operation(
        summary,
        ref("BulkResult"),
        400,
        403,
        422,
        parameters=[
            *RUN_FILTERS,
            query("before_id", ID, "only runs below this id: a dry run's before_id"),
            query("dry_run", BOOLEAN, "count the matching runs, change nothing"),
            query("all", BOOLEAN, "needed when no filter is given"),
        ],
        tag="runs",
    )


def _run_operation(summary: str) -> dict[str, Any]:
    return operation(summary, ref("Run"), 404, 409, 429, parameters=ID_PATH, tag="runs")


def _paths() -> dict[str, Any]:
    # Imported here: the realtime part builds on this module's helpers.
    from fairlane.web.api import openapi_realtime

    run_ops = _run_operation
    return {
        **openapi_realtime.paths(),
        "/tasks/{task}/trigger": {
            "post": operation(
                "Trigger one run; answers its id (an existing run's, for an active idempotency "
                "or debounce key)",
                {"type": "object", "properties": {"id": {"type": "integer"}}},
                400,
                403,
                404,
                413,
                422,
                429,
                request_body=body(ref("TriggerBody"), required=False),
                parameters=[path_param("task", TEXT)],
                tag="runs",
            )
        },
        "/tasks/trigger-many": {
            "post": operation(
                "Trigger many runs, all or none; ids in item order",
                {
                    "type": "object",
                    "properties": {"ids": {"type": "array", "items": {"type": "integer"}}},
                },
                400,
                403,
                404,
                413,
                422,
                429,
                request_body=body(ref("TriggerManyBody")),
                tag="runs",
            )
        },
        "/runs": {
            "get": operation(
                "Runs newest first, filtered; page with before_id",
                ref("RunPage"),
                400,
                403,
                parameters=[
                    *RUN_FILTERS,
                    query("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
                    query("before_id", ID, "next_before_id of the last page"),
                ],
                tag="runs",
            )
        },
        "/runs/retry": {"post": bulk_operation("Retry every matching run that can be")},
        "/runs/cancel": {
            "post": bulk_operation("Cancel every matching run still going, with its descendants")
        },
        "/runs/{id}": {
            "get": operation("One run", ref("Run"), 404, parameters=ID_PATH, tag="runs")
        },
        "/runs/{id}/cancel": {
            "post": operation(
                "Cancel a run and its descendants (a no-op on a final run)",
                ref("CancelResult"),
                404,
                parameters=ID_PATH,
                tag="runs",
            )
        },
        "/runs/{id}/retry": {
            "post": run_ops("Requeue a FAILED, CRASHED, TIMED_OUT, EXPIRED or SYSTEM_FAILURE run")
        },
        "/runs/{id}/reschedule": {
            "post": {
                **run_ops("Move a DELAYED run's start"),
                "requestBody": body(
                    {
                        "type": "object",
                        "required": ["delay"],
                        "properties": {
                            "delay": {
                                "oneOf": [DURATION, {"type": "string", "format": "date-time"}]
                            }
                        },
                    }
                ),
            }
        },
        "/tokens": {
            "post": operation(
                "Make a token in the key's environment; answers its callback URL",
                ref("Token"),
                403,
                413,
                422,
                ok=201,
                request_body=body(
                    {
                        "type": "object",
                        "properties": {
                            "idempotency_key": {"type": "string"},
                            "idempotency_ttl": DURATION,
                            "timeout": DURATION,
                            "environment": {"type": "string"},
                        },
                    },
                    required=False,
                ),
                tag="tokens",
            )
        },
        "/tokens/{id}": {
            "get": operation("One token", ref("Token"), 404, parameters=ID_PATH, tag="tokens")
        },
        "/tokens/{id}/complete": {
            "post": operation(
                "Complete a token with an output (completed: false if it already was)",
                {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}, "completed": {"type": "boolean"}},
                },
                404,
                413,
                422,
                parameters=ID_PATH,
                tag="tokens",
                request_body=body({"type": "object", "properties": {"output": {}}}, required=False),
            )
        },
        "/tokens/{id}/callback/{signature}": {
            "post": operation(
                "The callback URL: no key; the body (any JSON, or none) is the output",
                {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}, "completed": {"type": "boolean"}},
                },
                404,
                413,
                parameters=[*ID_PATH, path_param("signature", TEXT)],
                secured=False,
                request_body=body({}, required=False),
                tag="tokens",
            )
        },
        "/batches": {
            "post": operation(
                "Create a batch (phase one): charges the environment's batch bucket",
                ref("Batch"),
                403,
                404,
                413,
                422,
                429,
                ok=201,
                tag="batches",
                request_body=body(
                    {
                        "type": "object",
                        "required": ["run_count"],
                        "properties": {
                            "run_count": {**COUNT, "minimum": 1},
                            "parent_run_id": ID,
                            "idempotency_key": {"type": "string"},
                            "environment": {"type": "string"},
                        },
                    }
                ),
            )
        },
        "/batches/{id}": {
            "get": operation("One batch", ref("Batch"), 404, parameters=ID_PATH, tag="batches")
        },
        "/batches/{id}/items": {
            "post": operation(
                'Stream items as NDJSON (phase two), one {"task", "payload", "options", '
                '"index"?} per line; resends are deduplicated by index',
                ref("IngestResult"),
                404,
                408,
                409,
                422,
                429,
                tag="batches",
                parameters=[
                    *ID_PATH,
                    query("first_index", COUNT, "the index of the first line without one"),
                ],
                request_body=body({"type": "string"}, media="application/x-ndjson"),
            ),
            "get": operation(
                "A batch's items by index",
                ref("BatchItemPage"),
                400,
                404,
                tag="batches",
                parameters=[
                    *ID_PATH,
                    query("state", {"enum": list(BATCH_ITEM_STATES)}),
                    query("after_index", {**INT32, "minimum": -1}),
                    query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
                ],
            ),
        },
        "/limits": {
            "get": operation(
                "Every queue the key sees with caps and counts (and the scheduler, admin)",
                ref("LimitsOverview"),
                tag="limits",
            )
        },
        "/environments/{environment}/limits": {
            "get": operation(
                "An environment's limits",
                ref("EnvironmentLimits"),
                403,
                parameters=ENV_PATH,
                tag="limits",
            ),
            "put": operation(
                "Change an environment's limits (fields given only)",
                ref("EnvironmentLimits"),
                403,
                413,
                422,
                parameters=ENV_PATH,
                request_body=ENV_LIMITS_BODY,
                tag="limits",
            ),
        },
        "/environments/{environment}/pause": {
            "post": operation(
                "Pause an environment",
                ref("EnvironmentLimits"),
                403,
                parameters=ENV_PATH,
                tag="limits",
            )
        },
        "/environments/{environment}/resume": {
            "post": operation(
                "Resume an environment",
                ref("EnvironmentLimits"),
                403,
                parameters=ENV_PATH,
                tag="limits",
            )
        },
        "/environments/{environment}/queues/{queue}/limits": {
            "get": operation(
                "A queue's limits", ref("QueueLimits"), 403, parameters=QUEUE_PATH, tag="limits"
            ),
            "put": operation(
                "Change a queue's limits (fields given only)",
                ref("QueueLimits"),
                403,
                413,
                422,
                parameters=QUEUE_PATH,
                request_body=QUEUE_LIMITS_BODY,
                tag="limits",
            ),
        },
        "/environments/{environment}/queues/{queue}/keys": {
            "get": operation(
                "A queue's busiest concurrency keys: running, then queued",
                ref("QueueKeys"),
                403,
                422,
                parameters=[
                    *QUEUE_PATH,
                    query("top", {**COUNT, "minimum": 1}, "how many keys (default 10)"),
                ],
                tag="limits",
            )
        },
        "/environments/{environment}/queues/{queue}/pause": {
            "post": operation(
                "Pause a queue", ref("QueueLimits"), 403, parameters=QUEUE_PATH, tag="limits"
            )
        },
        "/environments/{environment}/queues/{queue}/resume": {
            "post": operation(
                "Resume a queue", ref("QueueLimits"), 403, parameters=QUEUE_PATH, tag="limits"
            )
        },
        "/scheduler": {
            "get": operation(
                "The scheduler's global settings (admin key)", ref("Scheduler"), 403, tag="limits"
            ),
            "put": operation(
                "Change the scheduler's global settings (admin key)",
                ref("Scheduler"),
                403,
                413,
                422,
                tag="limits",
                request_body=body(
                    {
                        "type": "object",
                        "properties": {
                            "quantum": {**COUNT, "minimum": 1},
                            "max_deficit": COUNT,
                            "global_concurrency_limit": NULLABLE_INT,
                            "rate_limit_per_s": RATE,
                            "rate_burst": RATE_BURST,
                        },
                    }
                ),
            ),
        },
        "/workers": {
            "get": operation(
                "The registered workers, and the tasks with queued runs that no live worker"
                " serves (admin key)",
                ref("Workers"),
                400,
                403,
                tag="workers",
                parameters=[
                    query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 1000},
                        "the most unserved tasks listed (default 100)",
                    )
                ],
            )
        },
        "/openapi.json": {
            "get": operation("This document", {"type": "object"}, secured=False, tag="meta")
        },
    }


@cache
def _release() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fairlane")
    except PackageNotFoundError:
        return "0"


@cache
def _body(server_url: str) -> bytes:
    return bytes(JSONResponse(document(server_url)).body)


def document(server_url: str = "/api/v1") -> dict[str, Any]:
    release = _release()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "fairlane HTTP API",
            "version": release,
            "description": "Trigger runs, stream batches, complete tokens, steer limits and "
            "follow runs live (Server-Sent Events). Authenticate with Authorization: Bearer "
            "<API key> (fairlane keys create), or a realtime token where an operation takes one. "
            'Errors answer {"error": {"type", "message", ...}}.',
        },
        "servers": [{"url": server_url}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": SCHEMAS,
        },
        "paths": _paths(),
    }


async def openapi(request: Request) -> Response:
    # Rendered once per address the app is reached at (a handful: hosts, mounts).
    return Response(_body(app_url(request, "/api/v1")), media_type="application/json")


routes = [Route("/openapi.json", openapi, methods=["GET"], name="openapi")]
