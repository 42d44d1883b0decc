"""The settings template: each kind of setting takes what it can hold and refuses the rest
with a typed error naming the setting."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fairlane.errors import SettingError
from fairlane.maintenance.jobs import JOBS, SETTINGS
from fairlane.maintenance.template import count, flag, seconds


@pytest.mark.parametrize(
    ("value", "kept"), [(1, 1), (5000, 5000), (7.0, 7)], ids=["one", "many", "whole-float"]
)
def test_a_count_takes_whole_numbers_at_least_its_minimum(value: Any, kept: int) -> None:
    assert count("prune_batch_size").validate(value) == kept


@pytest.mark.parametrize("value", [0, -3, 2.5, "10", True, None, math.inf, math.nan, [1]])
def test_a_count_refuses_what_it_cannot_hold(value: Any) -> None:
    with pytest.raises(SettingError) as refused:
        count("prune_batch_size").validate(value)
    assert refused.value.setting == "prune_batch_size"
    assert refused.value.value is value or refused.value.value != refused.value.value


def test_seconds_take_fractions_and_a_nullable_one_takes_null() -> None:
    assert seconds("prune_retention_s").validate(0.25) == 0.25
    assert seconds("max_ttl_s", nullable=True).validate(None) is None
    with pytest.raises(SettingError, match="null is not allowed"):
        seconds("prune_retention_s").validate(None)
    with pytest.raises(SettingError, match=">= 0"):
        seconds("prune_retention_s").validate(-1)


def test_a_flag_takes_only_booleans() -> None:
    assert flag("sweep_repair_waiting").validate(False) is False
    with pytest.raises(SettingError, match="true or false"):
        flag("sweep_repair_waiting").validate(1)


def test_every_job_names_its_own_file_and_settings_are_described_once() -> None:
    assert len({job.name for job in JOBS}) == len(JOBS)
    for job in JOBS:
        assert job.file.endswith(".sql")
        assert job.summary
    assert all(name == spec.name for name, spec in SETTINGS.items())
