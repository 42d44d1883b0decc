"""Faults to inject: a server backend stopped with SIGSTOP, a port nobody listens on, a port
that accepts connections and never answers, and a TCP proxy that can be taken down; and the
local ports of a process's sockets, to tell its backends in pg_stat_activity.

Stopping a backend needs the tests to run on the server's host as a user allowed to signal it
(root, or the server's own user); ``can_signal_backends`` says whether they do, and the tests
that need it are skipped otherwise. Every stopped backend is continued when the block ends,
whatever happens in it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from tests.helpers import poll


def backend_pids(db: psycopg.Connection[Any], application_name: str) -> list[int]:
    """The backends of the test's own database with that application_name."""
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = %s AND pid <> pg_backend_pid() ORDER BY backend_start",
        (application_name,),
    ).fetchall()
    return [pid for (pid,) in rows]


def backend_state(db: psycopg.Connection[Any], pid: int) -> tuple[str | None, str | None]:
    """(state, wait_event_type) of a backend."""
    row = db.execute(
        "SELECT state, wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return (row[0], row[1]) if row else (None, None)


def can_signal_backends(db: psycopg.Connection[Any]) -> bool:
    """Whether this process may SIGSTOP the server's backends (same host, permitted)."""
    address = db.info.host
    local = address.startswith("/") or address in ("127.0.0.1", "::1", "localhost")
    if not local:
        return False
    try:
        os.kill(db.info.backend_pid, 0)
    except (PermissionError, ProcessLookupError):
        return False
    return True


@contextlib.contextmanager
def stopped(*pids: int) -> Iterator[None]:
    """SIGSTOP the backends for the duration of the block; always SIGCONT them after."""
    done: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            done.append(pid)
        yield
    finally:
        for pid in done:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def stopped_between_statements(dsn: str, pid: int, *, within: float = 10.0) -> Iterator[None]:
    """SIGSTOP the backend at a moment it runs no statement (``idle``), and continue it when
    the block ends. Stopped inside a statement, a backend can hold a lock of the server's own
    that every other backend needs (the content lock of the leased index's rightmost page:
    every claim and every heartbeat writes its lease there), and no timeout interrupts a wait
    for one: every worker would hang, not only the one whose connection it is. A stopped
    backend reports no new state, so the state read after the stop is the one it keeps."""

    def stop_if_idle(watcher: psycopg.Connection[Any]) -> bool:
        os.kill(pid, signal.SIGSTOP)
        if backend_state(watcher, pid)[0] == "idle":
            return True
        os.kill(pid, signal.SIGCONT)
        return False

    with psycopg.connect(dsn, autocommit=True) as watcher:
        try:
            poll(lambda: stop_if_idle(watcher), within=within, what=f"backend {pid} idle")
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def local_ports(pid: int) -> set[int]:
    """The local TCP ports of the sockets process ``pid`` holds (its database
    connections), read from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def closed_port() -> int:
    """A local TCP port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A local TCP port that completes the handshake (the kernel does, from the backlog) and
    then never says a word: a hung server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


class Proxy:
    """A TCP forwarder to ``target`` on a local port, in threads: ``down()`` refuses new
    connections and cuts the open ones (a server gone), ``up()`` serves again on the same
    port."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = closed_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def dsn(self, dsn: str) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
        params.update(host="127.0.0.1", port=self.port)
        return make_conninfo("", **params)

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
