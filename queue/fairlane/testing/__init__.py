"""Testing code that uses fairlane (docs/testing.md).

- ``eager(tasks)``: eager mode for unit tests; a trigger runs the handler at once, in-process,
  with no database (``fairlane.testing.eager``).
- A pytest plugin, enabled with ``pytest_plugins = ["fairlane.testing"]`` in a conftest.py:
  a fresh migrated database per test, clients, workers that drain, eager mode
  (``fairlane.testing.plugin``). Importing this package without pytest installed gives eager
  mode and the helpers alone.
- ``TemplateDatabases`` and ``WorkerFixture``: what the fixtures are made of, for other test
  runners.
"""

from importlib.util import find_spec

from fairlane.testing.databases import TemplateDatabases
from fairlane.testing.eager import EagerRuns, eager
from fairlane.testing.workers import WorkerFixture
from fairlane.worker.registry import import_registry

__all__ = ["EagerRuns", "TemplateDatabases", "WorkerFixture", "eager", "import_registry"]

if find_spec("pytest") is not None:
    # pytest reads a plugin's hooks and fixtures from the module it names: this one.
    from fairlane.testing.plugin import (
        fairlane_async_client,
        fairlane_client,
        fairlane_databases,
        fairlane_dsn,
        fairlane_eager,
        fairlane_tasks,
        fairlane_worker,
        pytest_addoption,
    )

    __all__ += [
        "fairlane_async_client",
        "fairlane_client",
        "fairlane_databases",
        "fairlane_dsn",
        "fairlane_eager",
        "fairlane_tasks",
        "fairlane_worker",
        "pytest_addoption",
    ]
