"""Hostile requests, written as an attacker would send them: each with what its 4xx must name.

The API's are raw bodies (a client library would never send ``NaN`` or a 5,000-digit number)
by key A of environment ``env-a`` (``admin``: the admin key); the dashboard's go through an
admin session. Used in-process (tests/web/test_hostile_input.py) and against a real server
with a worker draining (the same file, ``test_an_attacker_...``).
"""

from __future__ import annotations

from dataclasses import dataclass

HUGE = "9" * 5000  # past the 4,300 digits Python reads
TWENTY = "9" * 20  # past bigint
FLOATLESS = "9" * 400  # past a double's range: float() of it raises
TRIGGER = "/api/v1/tasks/t/trigger"
ENV_LIMITS = "/api/v1/environments/env-a/limits"
QUEUE_LIMITS = "/api/v1/environments/env-a/queues/q/limits"
REALTIME_TOKENS = "/api/v1/realtime-tokens"


@dataclass(frozen=True)
class Hostile:
    method: str
    path: str
    body: str | None
    names: str  # the field, parameter, option or setting the error must name
    admin: bool = False

    @property
    def id(self) -> str:
        return f"{self.method} {self.path} {self.body or ''}"[:90]


def _options(name: str, value: str) -> str:
    return f'{{"options": {{"{name}": {value}}}}}'


API: list[Hostile] = [
    # Integers past 4,300 digits: json.loads raises a bare ValueError.
    Hostile("POST", TRIGGER, f'{{"payload": {HUGE}}}', "payload"),
    Hostile("POST", TRIGGER, f'{{"payload": {{"n": [1, -{HUGE}]}}}}', "payload.n[1]"),
    Hostile("POST", TRIGGER, _options("priority", HUGE), "options.priority"),
    Hostile("POST", TRIGGER, _options("delay", HUGE), "options.delay"),
    Hostile("POST", "/api/v1/tokens", f'{{"timeout": {HUGE}}}', "timeout"),
    Hostile("POST", "/api/v1/batches", f'{{"run_count": {HUGE}}}', "run_count"),
    Hostile(
        "POST",
        "/api/v1/tasks/trigger-many",
        f'{{"items": [{{"task": "t"}}, {{"task": "t", "payload": {HUGE}}}]}}',
        "items[1].payload",
    ),
    Hostile("PUT", ENV_LIMITS, f'{{"concurrency_limit": {HUGE}}}', "concurrency_limit"),
    # NUL in query and path values: no text column holds one.
    Hostile("GET", "/api/v1/runs?task=a%00b", None, "task"),
    Hostile("GET", "/api/v1/runs?queue=a%00b", None, "queue"),
    Hostile("GET", "/api/v1/runs?tag=ok&tag=a%00b", None, "tag"),
    Hostile("GET", "/api/v1/runs?environment=env-a%00", None, "environment"),
    Hostile("GET", "/api/v1/batches/1/items?state=FAILED%00", None, "state"),
    Hostile("POST", "/api/v1/tasks/a%00b/trigger", "{}", "path"),
    Hostile("GET", "/api/v1/environments/env-a%00/limits", None, "path"),
    Hostile("PUT", "/api/v1/environments/env-a%00/limits", '{"paused": true}', "path"),
    Hostile("POST", "/api/v1/environments/env-a/queues/q%00/pause", None, "path"),
    Hostile("GET", "/api/v1/environments/env-a/queues/q%00/limits", None, "path"),
    # NUL and lone surrogates inside JSON strings (and keys).
    Hostile("POST", TRIGGER, '{"payload": "a\\u0000b"}', "payload"),
    Hostile("POST", TRIGGER, '{"payload": {"k\\u0000": 1}}', "payload.'k\\x00'"),
    Hostile("POST", TRIGGER, _options("idempotency_key", '"\\ud800"'), "options.idempotency_key"),
    Hostile("POST", TRIGGER, _options("tags", '["ok", "\\udfff"]'), "options.tags[1]"),
    Hostile("POST", "/api/v1/tokens", '{"idempotency_key": "\\ud800"}', "idempotency_key"),
    Hostile(
        "POST",
        "/api/v1/batches",
        '{"run_count": 2, "idempotency_key": "k\\udbff"}',
        "idempotency_key",
    ),
    Hostile("POST", "/api/v1/tokens/1/complete", '{"output": "\\u0000"}', "output"),
    Hostile("POST", "/api/v1/tokens/1/callback/%C3%A9", "{}", "signature"),
    # Numbers out of range: integers to the column's, finite numbers only.
    Hostile("PUT", ENV_LIMITS, f'{{"concurrency_limit": {2**40}}}', "concurrency_limit"),
    Hostile("PUT", ENV_LIMITS, f'{{"size_limit": {10**20}}}', "size_limit"),
    Hostile("PUT", ENV_LIMITS, '{"burst_factor": 1e308}', "burst_factor"),
    Hostile("PUT", ENV_LIMITS, '{"burst_factor": NaN}', "burst_factor"),
    Hostile("PUT", ENV_LIMITS, '{"burst_factor": Infinity}', "burst_factor"),
    Hostile("PUT", ENV_LIMITS, '{"burst_factor": 1e400}', "burst_factor"),
    Hostile("PUT", QUEUE_LIMITS, f'{{"concurrency_limit": {2**40}}}', "concurrency_limit"),
    Hostile("PUT", QUEUE_LIMITS, f'{{"size_limit": {2**31}}}', "size_limit"),
    Hostile("POST", "/api/v1/batches", f'{{"run_count": {10**20}}}', "run_count"),
    Hostile("POST", "/api/v1/batches", f'{{"run_count": {-(10**20)}}}', "run_count"),
    Hostile("POST", TRIGGER, _options("priority", str(10**20)), "priority"),
    Hostile("POST", TRIGGER, _options("delay", "NaN"), "options.delay"),
    Hostile("POST", TRIGGER, _options("delay", "-Infinity"), "options.delay"),
    Hostile("POST", TRIGGER, '{"payload": [1.5, NaN]}', "payload[1]"),
    Hostile("POST", "/api/v1/tokens", '{"timeout": 1e308}', "timeout"),
    Hostile("PUT", "/api/v1/scheduler", '{"rate_burst": -1}', "rate_burst", admin=True),
    Hostile(
        "PUT", "/api/v1/scheduler", '{"rate_limit_per_s": 1e308}', "rate_limit_per_s", admin=True
    ),
    Hostile("PUT", "/api/v1/scheduler", f'{{"quantum": {2**40}}}', "quantum", admin=True),
    Hostile("PUT", "/api/v1/scheduler", f'{{"max_deficit": {2**31}}}', "max_deficit", admin=True),
    Hostile(
        "PUT",
        "/api/v1/scheduler",
        f'{{"global_concurrency_limit": {2**40}}}',
        "global_concurrency_limit",
        admin=True,
    ),
    # Integers no float holds: checks that convert before comparing fail.
    *(
        Hostile("POST", TRIGGER, _options(name, FLOATLESS), name)
        for name in (
            "priority",
            "delay",
            "ttl",
            "max_duration",
            "max_attempts",
            "parent_run_id",
            "parent_attempt",
        )
    ),
    Hostile(
        "POST",
        TRIGGER,
        _options("debounce", f'{{"key": "k", "delay": {FLOATLESS}}}'),
        "debounce.delay",
    ),
    Hostile("POST", "/api/v1/tokens", f'{{"timeout": {FLOATLESS}}}', "timeout"),
    Hostile("POST", "/api/v1/tokens", f'{{"idempotency_ttl": {FLOATLESS}}}', "idempotency_ttl"),
    Hostile("POST", "/api/v1/runs/1/reschedule", f'{{"delay": {FLOATLESS}}}', "delay"),
    Hostile("POST", "/api/v1/batches", f'{{"run_count": {FLOATLESS}}}', "run_count"),
    Hostile(
        "POST", "/api/v1/batches", f'{{"run_count": 2, "parent_run_id": {TWENTY}}}', "parent_run_id"
    ),
    Hostile("PUT", ENV_LIMITS, f'{{"burst_factor": {FLOATLESS}}}', "burst_factor"),
    Hostile("PUT", ENV_LIMITS, f'{{"concurrency_limit": {FLOATLESS}}}', "concurrency_limit"),
    Hostile(
        "PUT",
        "/api/v1/scheduler",
        f'{{"rate_limit_per_s": {FLOATLESS}}}',
        "rate_limit_per_s",
        admin=True,
    ),
    Hostile("PUT", "/api/v1/scheduler", f'{{"rate_burst": {FLOATLESS}}}', "rate_burst", admin=True),
    # Query and path integers: ASCII digits, within bigint.
    Hostile("GET", "/api/v1/runs?before_id=%C2%B2", None, "before_id"),
    Hostile("GET", f"/api/v1/runs?before_id={TWENTY}", None, "before_id"),
    Hostile("GET", "/api/v1/runs?limit=%D9%A3", None, "limit"),
    Hostile("GET", "/api/v1/workers?limit=%D9%A3", None, "limit", admin=True),
    Hostile("GET", f"/api/v1/workers?limit={HUGE}", None, "limit", admin=True),
    Hostile("GET", f"/api/v1/batches/1/items?after_index={HUGE}", None, "after_index"),
    Hostile("GET", f"/api/v1/runs/{TWENTY}", None, "id"),
    Hostile("POST", f"/api/v1/runs/{TWENTY}/cancel", None, "id"),
    Hostile("GET", f"/api/v1/tokens/{HUGE}", None, "id"),
    Hostile("GET", f"/api/v1/batches/{TWENTY}", None, "id"),
    # Realtime: token bodies, stream paths and parameters.
    Hostile("POST", REALTIME_TOKENS, f'{{"run_id": {HUGE}}}', "run_id"),
    Hostile("POST", REALTIME_TOKENS, f'{{"run_id": {TWENTY}}}', "run_id"),
    Hostile("POST", REALTIME_TOKENS, f'{{"batch_id": {FLOATLESS}}}', "batch_id"),
    Hostile("POST", REALTIME_TOKENS, '{"tag": "a\\u0000b"}', "tag"),
    Hostile("POST", REALTIME_TOKENS, '{"tag": "x", "lifetime": NaN}', "lifetime"),
    Hostile("POST", REALTIME_TOKENS, '{"tag": "x", "lifetime": 1e400}', "lifetime"),
    Hostile("POST", REALTIME_TOKENS, f'{{"tag": "x", "lifetime": {FLOATLESS}}}', "lifetime"),
    Hostile("POST", REALTIME_TOKENS, '{"tag": "x", "lifetime": 1e9}', "lifetime"),
    Hostile("GET", "/api/v1/tags/a%00b/events", None, "path"),
    Hostile("GET", f"/api/v1/tags/{'t' * 200}/events", None, "tag"),
    Hostile("GET", "/api/v1/runs/1/events?once=yes", None, "once"),
    Hostile("GET", "/api/v1/runs/1/events?once=1%00", None, "once"),
]


@dataclass(frozen=True)
class Page:
    method: str
    path: str
    names: str  # what the error page must say
    form: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        return f"{self.method} {self.path} {dict(self.form)}"[:90]


DASHBOARD: list[Page] = [
    Page("GET", "/runs?before_id=%C2%B2", "before_id"),
    Page("GET", f"/runs?before_id={TWENTY}", "before_id"),
    Page("GET", "/batches?before_id=%C2%B2", "before_id"),
    Page("GET", f"/batches?before_id={TWENTY}", "before_id"),
    Page("GET", "/runs?task=a%00b", "task"),
    Page("GET", "/runs?environment=a%00b", "environment"),
    Page("GET", "/runs?queue=a%00b", "queue"),
    Page("GET", "/runs?tag=a%00b", "tag"),
    Page("GET", "/batches?environment=a%00b", "environment"),
    Page("GET", f"/runs/{TWENTY}", "id"),
    Page("GET", f"/runs/{TWENTY}/partial", "id"),
    Page("GET", f"/batches/{HUGE}", "id"),
    Page("POST", f"/runs/{TWENTY}/cancel", "id"),
    Page("POST", f"/runs/{TWENTY}/retry", "id"),
    Page("POST", "/queues/pause", "NUL", (("environment", "env-a"), ("queue", "q\x00"))),
    Page("POST", "/queues/limits", "NUL", (("environment", "a\x00"), ("concurrency_limit", "1"))),
]
