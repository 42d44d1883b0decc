"""Each domain has one name: ``fairlane.limits``, ``fairlane.cron`` (public as
``fairlane.schedules``); the old ``fairlane.scheduling`` names still import, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

import fairlane
import fairlane.cron.expressions
import fairlane.cron.firing
import fairlane.limits
import fairlane.schedules
import fairlane.schema.revision
import fairlane.schema.revision_helpers


def test_limits_imports_both_ways() -> None:
    from fairlane import limits

    assert limits is fairlane.limits
    assert limits.set_queue is fairlane.limits.set_queue


def test_schedules_is_the_public_name_of_the_cron_functions() -> None:
    from fairlane.cron import api

    for name in fairlane.schedules.__all__:
        assert getattr(fairlane.schedules, name) is getattr(api, name)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("fairlane.scheduling.limits", fairlane.limits),
        ("fairlane.scheduling.cron", fairlane.cron.expressions),
        ("fairlane.scheduling.firing", fairlane.cron.firing),
    ],
)
def test_old_scheduling_names_import_with_a_warning(
    old: str, new: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [*sys.modules]:
        if name == "fairlane.scheduling" or name.startswith("fairlane.scheduling."):
            monkeypatch.delitem(sys.modules, name)
    with pytest.warns(DeprecationWarning, match="is deprecated") as caught:
        module = importlib.import_module(old)
    assert module is new
    assert any(f"{old} is deprecated" in str(warning.message) for warning in caught)


def test_landed_revisions_still_find_their_helpers() -> None:
    for name in ("schema", "execute", "drop_functions", "drop_trigger"):
        helper = getattr(fairlane.schema.revision_helpers, name)
        assert getattr(fairlane.schema.revision, name) is helper
