"""A PgBouncer of the test's own, in transaction mode, in front of the test server.

It runs the Debian package's binary with a throwaway configuration: a free local port, trust
authentication (the role must still be in its auth file), every database forwarded by name to
the test server, ``ignore_startup_parameters = options`` (fairlane sends its timeouts as the
``options`` startup parameter, which PgBouncer refuses unless told to ignore it: it could not
give each client its own settings on shared server sessions; ignored, the server's own settings
apply) and a small server pool so that clients really share server sessions. PgBouncer
refuses to run as root, so under root it switches to the ``postgres`` user (``-u``).

``.ci/run`` installs the package; a local run without it skips the tests that need it, a run
with ``CI=true`` fails them instead.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.helpers.faults import closed_port

# Server connections per database and user: fewer than a worker has loops, so transactions of
# different clients take turns on the same server sessions.
POOL_SIZE = 4
# PgBouncer runs as this user when the tests run as root.
RUN_AS = "postgres"
START_WITHIN_S = 10.0

CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
admin_users = {user}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 200
ignore_startup_parameters = options
server_reset_query =
log_connections = 0
log_disconnections = 0
"""


def binary() -> str | None:
    """The pgbouncer executable (the Debian package puts it in /usr/sbin)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


def require_binary() -> str:
    """The executable, or the test skipped (locally) or failed (in CI) without it."""
    found = binary()
    if found is None:
        reason = "pgbouncer is not installed (`apt-get install pgbouncer`; .ci/run does)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


class PgBouncer:
    """One pgbouncer process; ``dsn(test_dsn)`` is the test's DSN through it."""

    def __init__(self, executable: str, server_host: str, server_port: int, user: str) -> None:
        self.executable = executable
        self.server = (server_host, server_port)
        self.user = user
        self.port = closed_port()
        self.process: subprocess.Popen[bytes] | None = None
        # Readable by the user pgbouncer switches to (a pytest tmp_path under root is not).
        self.directory = Path(tempfile.mkdtemp(prefix="fairlane-pgbouncer-"))
        self.directory.chmod(0o755)
        self.log_path = self.directory / "pgbouncer.log"

    def dsn(self, dsn: str) -> str:
        params = conninfo_to_dict(dsn)
        params.update(host="127.0.0.1", port=self.port)
        return make_conninfo("", **params)

    def admin_dsn(self) -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user=self.user, dbname="pgbouncer")

    def start(self) -> None:
        auth_file = self.directory / "users.txt"
        auth_file.write_text(f'"{self.user}" ""\n')
        config = self.directory / "pgbouncer.ini"
        text = CONFIG.format(
            host=self.server[0],
            port=self.server[1],
            listen_port=self.port,
            auth_file=auth_file,
            user=self.user,
            pool_size=POOL_SIZE,
        )
        config.write_text(text)
        for path in (auth_file, config):
            path.chmod(0o644)
        command = [self.executable, str(config)]
        if os.geteuid() == 0:
            pwd.getpwnam(RUN_AS)  # KeyError: no such user to run as
            command[1:1] = ["-u", RUN_AS]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_until_it_answers()

    def _wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + START_WITHIN_S
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log()}")
            try:
                with psycopg.connect(self.admin_dsn(), autocommit=True, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not answer: {self.log()}") from None
                time.sleep(0.05)

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (CONFIG, POOLS, SERVERS...)."""
        with psycopg.connect(self.admin_dsn(), autocommit=True) as admin:
            cursor = admin.execute(f"SHOW {what}")
            names = [column.name for column in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def pgbouncer_for(db: psycopg.Connection[Any]) -> Iterator[PgBouncer]:
    """A PgBouncer in front of the server ``db`` is connected to, for the block."""
    info = db.info
    bouncer = PgBouncer(require_binary(), info.host, info.port, info.user)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.stop()
