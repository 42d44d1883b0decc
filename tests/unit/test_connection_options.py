"""Connection options: what fairlane adds to a DSN, what a DSN keeps, and malformed DSNs."""

from __future__ import annotations

import pytest

from fairlane.connection import (
    DEFAULT_CONNECT_TIMEOUT,
    ConnectionOptions,
    check_dsn,
    connect_timeout_for,
    hide_password,
)
from fairlane.errors import ConfigurationError


def test_timeouts_and_settings_become_connection_options() -> None:
    options = ConnectionOptions(
        connect_timeout=3.5,
        statement_timeout=2.5,
        lock_timeout=0.25,
        application_name="fairlane claim",
        settings={"synchronous_commit": "off"},
    )
    kwargs = options.kwargs("postgresql://db/app")
    assert kwargs == {
        "autocommit": True,
        "connect_timeout": 4,
        "prepare_threshold": 5,
        "keepalives": 1,
        "keepalives_idle": 15,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 30000,
        "application_name": "fairlane claim",
        "options": "-c statement_timeout=2500 -c lock_timeout=250 -c synchronous_commit=off",
    }
    assert options.answer_within == 3.5


def test_the_dsn_keeps_its_own_parameters_and_options() -> None:
    dsn = "host=db keepalives_idle=60 application_name=mine options='-c search_path=app'"
    kwargs = ConnectionOptions(statement_timeout=None).kwargs(dsn)
    assert "keepalives_idle" not in kwargs
    assert "application_name" not in kwargs
    assert kwargs["keepalives_count"] == 3
    # Its options come last, so they win over fairlane's.
    assert kwargs["options"] == "-c search_path=app"
    assert ConnectionOptions(statement_timeout=None).answer_within is None


def test_libpq_counts_whole_seconds_and_at_least_two() -> None:
    assert ConnectionOptions(connect_timeout=0.5).kwargs("")["connect_timeout"] == 2
    assert ConnectionOptions(connect_timeout=7).kwargs("")["connect_timeout"] == 7


@pytest.mark.parametrize("bad", [0, -1, float("inf"), "5", True])
def test_timeouts_must_be_positive_numbers(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        ConnectionOptions(connect_timeout=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://db:port/app",
        "postgresql://db:0/app",
        "host=db port=5432,x",
        "host=db nonsense=1",
        "not a dsn",
        "postgresql://user:hunter2@[::1/app",
    ],
)
def test_malformed_dsns_are_refused_in_one_line(dsn: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^malformed database URL: ") as raised:
        check_dsn(dsn)
    assert "hunter2" not in str(raised.value)
    assert "\n" not in str(raised.value)


def test_passwords_are_hidden() -> None:
    assert hide_password("postgresql://u:s3cret@db/app") == "postgresql://u:***@db/app"
    assert hide_password("host=db password=s3cret user=u") == "host=db password=*** user=u"
    assert hide_password("host=db password='a b' user=u") == "host=db password=*** user=u"


def test_prepare_threshold_is_psycopgs_and_none_never_prepares() -> None:
    assert ConnectionOptions().kwargs("")["prepare_threshold"] == 5
    assert ConnectionOptions(prepare_threshold=None).kwargs("")["prepare_threshold"] is None
    assert ConnectionOptions(prepare_threshold=0).kwargs("")["prepare_threshold"] == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "5", True])
def test_prepare_threshold_must_be_none_or_a_count(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="prepare_threshold"):
        ConnectionOptions(prepare_threshold=bad)  # type: ignore[arg-type]


def test_the_connect_timeout_is_the_one_given_else_the_dsns_else_the_default() -> None:
    assert connect_timeout_for("host=db connect_timeout=3", 7) == 7
    assert connect_timeout_for("host=db connect_timeout=3", None) == 3
    assert connect_timeout_for("postgresql://db/app?connect_timeout=12", None) == 12
    assert connect_timeout_for("host=db", None) == DEFAULT_CONNECT_TIMEOUT
    assert connect_timeout_for(None, None) == DEFAULT_CONNECT_TIMEOUT


@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
def test_a_dsn_connect_timeout_must_be_positive(bad: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^malformed database URL: connect_timeout"):
        connect_timeout_for(f"host=db connect_timeout={bad}", None)
