"""Finding the peer harness and running its scripts the way its own ``run_all.sh`` does.

The harness lives outside the repository and is found through ``PEERS_DIR`` (``--peers-dir``);
unset, the suite runs fairlane's steps alone. Its scripts run from the harness directory with
the interpreters ``run_all.sh`` uses: ``$PEERS_VENV/bin/python`` and
``$PEERS_NODE/node_modules/.bin/node`` (with ``NODE_PATH`` on its ``node_modules``), where
``PEERS_VENV`` and ``PEERS_NODE`` default to what ``run_all.sh`` itself defaults them to.
"""

from __future__ import annotations

import getpass
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from psycopg.conninfo import conninfo_to_dict

from fairlane.tools.bench.suite.sides import Side

RUN_ALL = "run_all.sh"
CHECK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Harness:
    directory: Path
    python: Path
    node: Path
    node_modules: Path


def run_all_default(script: str, variable: str) -> str | None:
    """The default ``run_all.sh`` gives ``variable``: the ``X`` of its ``${VARIABLE:-X}``."""
    found = re.search(r"\$\{" + re.escape(variable) + r":-([^}]+)\}", script)
    return found.group(1) if found else None


def find_harness(peers_dir: str | None, environ: Mapping[str, str]) -> Harness | str:
    """The harness, or why there is none to run."""
    directory = peers_dir or environ.get("PEERS_DIR") or ""
    if not directory:
        return "PEERS_DIR is not set"
    run_all = Path(directory) / RUN_ALL
    if not run_all.is_file():
        return f"no {RUN_ALL} in PEERS_DIR ({directory})"
    script = run_all.read_text()
    venv = environ.get("PEERS_VENV") or run_all_default(script, "PEERS_VENV")
    node_dir = environ.get("PEERS_NODE") or run_all_default(script, "PEERS_NODE")
    if not venv or not node_dir:
        return f"{RUN_ALL} names no default PEERS_VENV or PEERS_NODE: set both"
    modules = Path(node_dir) / "node_modules"
    return Harness(
        Path(directory), Path(venv) / "bin" / "python", modules / ".bin" / "node", modules
    )


def command(harness: Harness, side: Side, argv: tuple[str, ...]) -> list[str]:
    interpreter = harness.python if side.runtime == "python" else harness.node
    return [str(interpreter), side.script, *argv]


def environment(harness: Harness, environ: Mapping[str, str], server: str | None) -> dict[str, str]:
    """The environment ``run_all.sh`` gives its steps, pointed at ``server`` when one is named."""
    env = dict(environ)
    env["NODE_PATH"] = str(harness.node_modules)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if server and "PEERS_PG" not in environ:
        env.update(server_variables(server))
    return env


def server_variables(server: str) -> dict[str, str]:
    """``PEERS_PG`` (a URL without database) and ``PEERS_ADMIN_DB`` for a server DSN, so the
    peers create their databases on the server fairlane's steps use."""
    params = conninfo_to_dict(server)
    user = str(params.get("user") or getpass.getuser())
    password = params.get("password")
    credentials = quote(user, safe="") + (f":{quote(str(password), safe='')}" if password else "")
    host = quote(str(params.get("host") or "127.0.0.1"), safe="")
    port = f":{params['port']}" if params.get("port") else ""
    return {
        "PEERS_PG": f"postgresql://{credentials}@{host}{port}",
        "PEERS_ADMIN_DB": str(params.get("dbname") or "postgres"),
    }


def missing(harness: Harness, side: Side, env: Mapping[str, str]) -> str | None:
    """Why ``side`` cannot run from this harness, or None when it can."""
    interpreter = harness.python if side.runtime == "python" else harness.node
    if not (harness.directory / side.script).is_file():
        return f"no {side.script} in the harness"
    if not os.access(interpreter, os.X_OK):
        return f"no {side.runtime} at {interpreter} (the harness's setup.sh installs it)"
    if side.runtime == "python":
        probe = [str(interpreter), "-c", f"import {side.package}"]
    else:
        probe = [str(interpreter), "-e", f"require.resolve({side.package!r})"]
    try:
        done = subprocess.run(
            probe,
            cwd=harness.directory,
            env=dict(env),
            capture_output=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{side.package} could not be checked: {error}"
    if done.returncode != 0:
        return f"{side.package} is not installed for {interpreter}"
    return None
