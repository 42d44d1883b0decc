"""An embedded PostgreSQL server, for ``make demo`` on a machine that has none.

The ``pgserver`` package (the ``embedded`` extra) ships PostgreSQL's binaries in a wheel and
runs a server on a data folder of our choosing: ``.pgdata/`` at the top of the source tree
(``FAIRLANE_PGDATA`` overrides it). The server listens on a Unix socket inside that folder and
on no TCP port, so it never collides with a local server on 5432.

PostgreSQL refuses to run as root. Run as root, pgserver handles that itself: it creates an
unprivileged system user ``pgserver`` (with ``useradd``) when there is none, hands it the data
folder and runs ``initdb`` and ``pg_ctl`` as that user. So that user can reach the data folder
and the binaries inside the virtualenv, pgserver also adds read and traverse permission for
group and others (``chmod g+rx,o+rx``) to every parent folder of both.

``choose_database`` decides where the demo runs: an explicit URL or ``DATABASE_URL`` first;
else the local server at the default address when something answers there; else this
embedded server. ``FAIRLANE_EMBEDDED=1`` (or ``fairlane demo --embedded``) forces the embedded
server even when another one answers; ``FAIRLANE_EMBEDDED=0`` forbids it.

``python -m fairlane.tools.embedded start`` starts a server that outlives the command and prints its
URL; ``python -m fairlane.tools.embedded stop`` stops it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self
from urllib.parse import quote

from fairlane.config import DEFAULT_DATABASE_URL, psycopg_dsn
from fairlane.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable

    from pgserver.postgres_server import PostgresServer

EMBEDDED_ENV = "FAIRLANE_EMBEDDED"
DATA_DIR_ENV = "FAIRLANE_PGDATA"
DATABASE = "fairlane"

log = logging.getLogger("fairlane.tools.embedded")


def source_root() -> Path | None:
    """The top of the source tree when fairlane runs from one (an editable install)."""
    top = Path(__file__).resolve().parents[4]
    return top if (top / "pyproject.toml").is_file() and (top / "queue").is_dir() else None


def default_data_dir() -> Path:
    """``$FAIRLANE_PGDATA``, else ``.pgdata/`` in the source tree, else in the current folder."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return (source_root() or Path.cwd()) / ".pgdata"


def embedded_setting(explicit: bool | None = None) -> bool | None:
    """True: use the embedded server. False: never. None: only when nothing else answers."""
    if explicit is not None:
        return explicit
    value = os.environ.get(EMBEDDED_ENV, "").strip().lower()
    if not value:
        return None
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ConfigurationError(f"{EMBEDDED_ENV}={value!r}: expected 1 or 0")


def address_answers(url: str, timeout: float = 1.0) -> bool:
    """Whether anything accepts a connection at the (first) host and port ``url`` names."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(psycopg_dsn(url))
    host = str(params.get("host") or "localhost").split(",")[0]
    port = int(str(params.get("port") or 5432).split(",")[0])
    targets: list[tuple[socket.AddressFamily, str | tuple[str, int]]]
    if host.startswith("/"):
        targets = [(socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")]
    else:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return False
        targets = [(family, (str(addr[0]), int(addr[1]))) for family, *_, addr in found]
    for family, address in targets:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout)
            try:
                probe.connect(address)
            except OSError:
                continue
            return True
    return False


class EmbeddedPostgres:
    """A pgserver-managed PostgreSQL on ``data_dir``.

    ``stop`` (or leaving the ``with`` block, or the process exiting) stops the server unless
    ``keep`` is set or another process still uses it.
    """

    def __init__(self, data_dir: Path | None = None, *, keep: bool = False) -> None:
        self.data_dir = data_dir or default_data_dir()
        self.keep = keep
        self._server: PostgresServer | None = None

    def start(self) -> Self:
        """Initialise the data folder if it is new, and start the server unless it runs."""
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        _forget_dead_handles(self.data_dir)
        get_server = _pgserver_get_server()
        self._server = get_server(self.data_dir, cleanup_mode=None if self.keep else "stop")
        return self

    @property
    def server(self) -> PostgresServer:
        if self._server is None:
            raise RuntimeError("the embedded server is not started")
        return self._server

    def url(self, database: str = DATABASE) -> str:
        """A ``postgresql://`` URL for ``database`` over the server's Unix socket."""
        info = self.server.get_postmaster_info()
        host = quote(str(info.socket_dir), safe="/")
        return f"postgresql://postgres@/{database}?host={host}&port={info.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def stop_data_dir(data_dir: Path | None = None) -> bool:
    """Stop whatever server runs on ``data_dir``, as the folder's owner. True if one did."""
    data_dir = data_dir or default_data_dir()
    if not (data_dir / "postmaster.pid").exists():
        return False
    with _quiet_import():
        from pgserver._commands import POSTGRES_BIN_PATH

    owner = data_dir.stat().st_uid
    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "stop"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        user=owner if os.geteuid() == 0 and owner != 0 else None,
    )
    if done.returncode != 0:
        log.info("pg_ctl stop: %s", done.stderr.strip())
    return done.returncode == 0


@dataclass(frozen=True, slots=True)
class DatabaseChoice:
    url: str
    # Why this database: "--dsn", "DATABASE_URL", "local server" or "embedded".
    source: str
    embedded: EmbeddedPostgres | None = None


def choose_database(
    explicit_url: str | None = None, *, embedded: bool | None = None
) -> DatabaseChoice:
    """Where to run (see the module docstring). Starts the embedded server when it is chosen."""
    setting = embedded_setting(embedded)
    if setting is not True:
        if explicit_url:
            return DatabaseChoice(explicit_url, "--dsn")
        if os.environ.get("DATABASE_URL"):
            return DatabaseChoice(os.environ["DATABASE_URL"], "DATABASE_URL")
        if setting is False or address_answers(DEFAULT_DATABASE_URL):
            return DatabaseChoice(DEFAULT_DATABASE_URL, "local server")
    server = EmbeddedPostgres().start()
    return DatabaseChoice(server.url(), "embedded", server)


def _pgserver_get_server() -> Callable[..., PostgresServer]:
    try:
        with _quiet_import():
            from pgserver.postgres_server import get_server
    except ImportError as missing:
        raise ConfigurationError(
            "the embedded PostgreSQL needs the 'pgserver' package: "
            "pip install 'fairlane[embedded]' (make install does)"
        ) from missing
    # pgserver logs every command it runs at INFO; its errors (with the server log) remain.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    return get_server


@contextmanager
def _quiet_import() -> Iterator[None]:
    # platformdirs warns on import when XDG_RUNTIME_DIR is unset (as for root); pgserver copes.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _forget_dead_handles(data_dir: Path) -> None:
    """Drop processes that died without saying so from pgserver's list of users of a server.

    pgserver stops a server only when its last user lets go; a user killed outright stays on
    the list, and the server would then never be stopped.
    """
    handles = data_dir / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _pid_alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fairlane.tools.embedded",
        description="Start (and print the URL of) or stop the embedded PostgreSQL server.",
    )
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--data-dir", type=Path, help=f"default: ${DATA_DIR_ENV} or .pgdata/")
    parser.add_argument("--database", default=DATABASE, help="database named in the URL")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    data_dir = args.data_dir.resolve() if args.data_dir else None
    try:
        if args.action == "stop":
            print("stopped" if stop_data_dir(data_dir) else "not running", file=sys.stderr)
        else:
            print(EmbeddedPostgres(data_dir, keep=True).start().url(args.database))
    except ConfigurationError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
