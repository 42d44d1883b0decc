"""A throwaway PostgreSQL cluster of the test's own, which it may restart, crash and freeze.

It is made with the local PostgreSQL binaries (initdb, pg_ctl) in a temporary directory, on a
free local port, trust authentication, the superuser named after the user running the tests.
initdb and postgres refuse to run as root, so under root they run as the ``postgres`` user
(runuser); root may still signal the server's processes.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from psycopg.conninfo import make_conninfo

from tests.helpers.faults import closed_port

RUN_AS = "postgres"
SETTINGS = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
max_connections = 150
shared_buffers = 64MB
log_min_messages = warning
log_line_prefix = '%m [%p] %a '
"""


def bindir() -> Path | None:
    """The directory of the newest local PostgreSQL's server binaries."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    return candidates[0].parent if candidates else None


class Cluster:
    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.root = os.geteuid() == 0
        self.user = getpass.getuser()
        self.port = closed_port()
        self.directory = Path(tempfile.mkdtemp(prefix="fairlane-cluster-"))
        self.directory.chmod(0o755)  # the server's user must reach its data directory
        self.data = self.directory / "data"
        self.log_path = self.directory / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user=self.user, dbname=dbname)

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binaries / command[0]), *command[1:]]
        if self.root:
            argv = ["runuser", "-u", RUN_AS, "--", *argv]
        return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=120)

    def init(self) -> None:
        self.data.mkdir(mode=0o700)
        self.log_path.touch()
        if self.root:
            owner = pwd.getpwnam(RUN_AS)
            for path in (self.data, self.log_path):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            self.user,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(SETTINGS.format(port=self.port))

    def start(self) -> None:
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60", "start"
        )

    def restart(self, mode: str) -> float:
        """Stop the server (``fast``: sessions terminated, a checkpoint; ``immediate``: a crash,
        recovered at start) and start it again. Returns the seconds it took."""
        started = time.monotonic()
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-m",
            mode,
            "-w",
            "-t",
            "60",
            "restart",
        )
        return time.monotonic() - started

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def server_pids(self) -> list[int]:
        """The postmaster and every process it started (backends, background workers)."""
        postmaster = self.postmaster_pid()
        children = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(entry.name))
        return [postmaster, *children]

    def freeze(self) -> list[int]:
        """SIGSTOP the whole server: it accepts TCP connections (the kernel does) and answers
        nothing. Returns the stopped pids, for ``thaw``."""
        stopped = []
        for pid in self.server_pids():
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                # A backend that exited after it was listed: nothing to stop. (Raising here
                # left the rest of the server stopped, and every later test on it hung.)
                continue
            stopped.append(pid)
        return stopped

    @staticmethod
    def thaw(pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)
