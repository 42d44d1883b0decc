"""Cron schedules, per environment: ``create``, ``list_schedules``, ``get``, ``pause``,
``resume``, ``delete`` and ``trigger`` (each with an ``_async`` twin), on a psycopg connection
(autocommit applies at once; in a transaction, at its commit).

A schedule is keyed by its environment and ``external_id`` (one schedule per customer: the
customer's id); ``create`` with a key that exists updates that schedule. Tasks may also declare
one, ``@tasks.task(cron="*/5 * * * *", timezone="Europe/Paris")``: workers create it in the
``default`` environment when they start, under the key ``task:<name>``. Every worker fires due
schedules (fairlane.cron.firing): each tick makes one run, never two.

The functions live in ``fairlane.cron`` (cron/api.py), with the cron expressions
(cron/expressions.py) and the firing (cron/firing.py); this module is their public name.
"""

from fairlane.cron.api import (
    create as create,
)
from fairlane.cron.api import (
    create_async as create_async,
)
from fairlane.cron.api import (
    # A worker's: the schedules its tasks declare, created when it starts.
    declare_async as declare_async,
)
from fairlane.cron.api import (
    declared_params as declared_params,
)
from fairlane.cron.api import (
    delete as delete,
)
from fairlane.cron.api import (
    delete_async as delete_async,
)
from fairlane.cron.api import (
    get as get,
)
from fairlane.cron.api import (
    get_async as get_async,
)
from fairlane.cron.api import (
    list_schedules as list_schedules,
)
from fairlane.cron.api import (
    list_schedules_async as list_schedules_async,
)
from fairlane.cron.api import (
    pause as pause,
)
from fairlane.cron.api import (
    pause_async as pause_async,
)
from fairlane.cron.api import (
    resume as resume,
)
from fairlane.cron.api import (
    resume_async as resume_async,
)
from fairlane.cron.api import (
    trigger as trigger,
)
from fairlane.cron.api import (
    trigger_async as trigger_async,
)

__all__ = [
    "create",
    "create_async",
    "delete",
    "delete_async",
    "get",
    "get_async",
    "list_schedules",
    "list_schedules_async",
    "pause",
    "pause_async",
    "resume",
    "resume_async",
    "trigger",
    "trigger_async",
]
