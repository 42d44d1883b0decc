"""The sync deadline watchdog: a connection whose block outlives its deadline is abandoned,
one that ends in time is left alone, whatever the mix of deadline lengths."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from fairlane.connection import deadline


class FakeConnection:
    """What ``abort`` touches: ``pgconn.socket``, on one end of a socket pair."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair()

        class PGconn:
            socket = self.ours.fileno()

        self.pgconn = PGconn()

    def read(self) -> bytes:
        return self.ours.recv(1)

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()


def test_an_expired_deadline_unblocks_the_read() -> None:
    conn = FakeConnection()
    try:
        started = time.monotonic()
        with deadline.bounded(conn, 0.2) as armed:  # type: ignore[arg-type]
            assert conn.read() == b""  # the socket was shut down
        assert armed is not None
        assert armed.expired
        assert 0.15 < time.monotonic() - started < 2
    finally:
        conn.close()


def test_deadlines_of_several_lengths_expire_in_their_own_time() -> None:
    conns = [FakeConnection() for _ in range(3)]
    expired: dict[int, float] = {}
    started = time.monotonic()

    def wait(index: int, seconds: float, conn: Any) -> None:
        with deadline.bounded(conn, seconds):
            conn.read()
        expired[index] = time.monotonic() - started

    threads = [
        threading.Thread(target=wait, args=(index, seconds, conn))
        for index, (seconds, conn) in enumerate(zip((0.6, 0.2, 0.4), conns, strict=True))
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(5)
        assert sorted(expired, key=expired.__getitem__) == [1, 2, 0]
    finally:
        for conn in conns:
            conn.close()


def test_a_block_that_ends_in_time_is_left_alone() -> None:
    conn = FakeConnection()
    try:
        for _ in range(100):
            with deadline.bounded(conn, 0.05) as armed:  # type: ignore[arg-type]
                pass
            assert armed is not None
            assert not armed.expired
        time.sleep(0.15)
        conn.theirs.sendall(b"x")
        assert conn.read() == b"x", "the socket still works"
        assert deadline.bounded(conn, None).__enter__() is None  # type: ignore[arg-type]
    finally:
        conn.close()
