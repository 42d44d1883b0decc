"""``fairlane keys`` and ``fairlane serve``."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from fairlane.cli import main as cli_main
from fairlane.web.keys import key_hash
from tests.helpers.serve import serve


def test_keys_create_list_revoke(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["keys", "create", "--dsn", dsn, "--environment", "acme", "--name", "ci"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    key = out[-1]
    assert key.startswith("fl_")
    assert len(key) > 40
    assert key not in "\n".join(out[:-1])
    stored = db.execute("SELECT id, environment, kind, secret_hash FROM fairlane.api_keys")
    ((key_id, environment, kind, digest),) = stored.fetchall()
    assert (environment, kind, digest) == ("acme", "environment", key_hash(key))

    assert cli_main(["keys", "create", "--dsn", dsn, "--admin"]) == 0
    admin = capsys.readouterr().out.strip().splitlines()[-1]
    assert admin != key

    assert cli_main(["keys", "list", "--dsn", dsn, "--environment", "acme"]) == 0
    listed = capsys.readouterr().out
    assert key[:10] in listed
    assert key not in listed
    assert admin[:10] not in listed
    assert cli_main(["keys", "list", "--dsn", dsn, "--json"]) == 0
    documents = json.loads(capsys.readouterr().out)
    assert [d["kind"] for d in documents] == ["environment", "admin"]

    # Not found in that environment: exit 3, as for any id that does not exist.
    assert cli_main(["keys", "revoke", "--dsn", dsn, str(key_id), "--environment", "other"]) == 3
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["keys", "revoke", "--dsn", dsn, str(key_id)]) == 0
    capsys.readouterr()
    assert cli_main(["keys", "list", "--dsn", dsn, "--environment", "acme"]) == 0
    assert key[:10] not in capsys.readouterr().out
    assert cli_main(["keys", "list", "--dsn", dsn, "--all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["revoked_at"] is not None

    with pytest.raises(SystemExit):
        cli_main(["keys", "create", "--dsn", dsn])


@pytest.mark.slow
def test_serve_runs_the_app_under_uvicorn(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from fairlane.web.keys import create_key

    _record, key = create_key(db, "acme")
    log = tmp_path / "serve.log"
    with serve(dsn, "--session-idle", "2m", "--log-level", "info", log=log) as server:
        base = server.url
        headers = {"Authorization": f"Bearer {key}"}
        made = httpx.post(f"{base}/api/v1/tasks/t/trigger", headers=headers, json={"payload": 1})
        assert made.status_code == 200
        assert httpx.get(f"{base}/api/v1/runs", headers=headers).json()["data"][0]["payload"] == 1
        # The dashboard's sessions are opened under the idle time given.
        admin = create_key(db, None, admin=True)[1]
        with httpx.Client(base_url=base) as browser:
            form = browser.get("/login").text
            csrf = form.split('name="csrf" value="')[1].split('"')[0]
            signed_in = browser.post("/login", data={"csrf": csrf, "key": admin})
            assert signed_in.status_code == 303
            assert browser.get("/queues").headers["x-frame-options"] == "DENY"
        stored = db.execute("SELECT idle_s FROM fairlane.dashboard_sessions").fetchall()
        assert stored == [(120.0,)]
    output = log.read_text()
    # uvicorn shuts down gracefully, then re-raises the signal it got (newer releases).
    assert server.process.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert key not in output
    assert "POST /api/v1/tasks/t/trigger 200" in output


def test_serve_refuses_an_idle_time_that_is_no_duration(capsys: pytest.CaptureFixture[str]) -> None:
    for given in ("soon", "0", "500ms"):
        with pytest.raises(SystemExit) as stopped:
            cli_main(["serve", "--session-idle", given])
        assert stopped.value.code == 2
        assert "--session-idle" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option",
    [
        ["--upload-idle-timeout", "0"],
        ["--upload-idle-timeout", "nan"],
        ["--upload-idle-timeout", "soon"],
        ["--uploads-per-environment", "0"],
        ["--uploads-per-environment", "2.5"],
        ["--max-streams", "0"],
        ["--streams-per-environment", "-1"],
        ["--shutdown-timeout", "0"],
    ],
)
def test_serve_refuses_a_bad_upload_bound(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        cli_main(["serve", "--dsn", "postgresql://127.0.0.1:1/none", *option])
    assert refused.value.code == 2
    assert option[0] in capsys.readouterr().err


def test_create_app_refuses_a_bad_upload_bound() -> None:
    from fairlane.errors import ConfigurationError
    from fairlane.web import create_app

    bad: list[dict[str, Any]] = [
        {"upload_idle_timeout": 0},
        {"upload_idle_timeout": True},
        {"uploads_per_environment": 0},
        {"uploads_per_environment": 1.5},
    ]
    for options in bad:
        with pytest.raises(ConfigurationError):
            create_app("postgresql://127.0.0.1:1/none", **options)


def test_create_app_refuses_bad_stream_settings() -> None:
    from fairlane.errors import ConfigurationError
    from fairlane.web import create_app
    from fairlane.web.realtime.settings import StreamSettings

    bad: list[dict[str, Any]] = [
        {"heartbeat_s": 0},
        {"lifetime_s": float("inf")},
        {"per_environment": 0},
        {"total": True},
    ]
    for options in bad:
        with pytest.raises(ConfigurationError):
            create_app("postgresql://127.0.0.1:1/none", streams=StreamSettings(**options))
