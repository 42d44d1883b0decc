"""The job and setting descriptions of fairlane.maintenance match the database: every periodic
job and every setting a migrated database holds is described, with the function and file the
description names, and a setting is validated before it is written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import maintenance
from fairlane.engine.sqlfiles import sql_dir
from fairlane.errors import SettingError, UnknownMaintenanceItemError
from fairlane.maintenance.jobs import JOBS_BY_NAME, SETTINGS


def test_every_periodic_job_is_described_with_its_function_and_file(
    db: psycopg.Connection[Any],
) -> None:
    jobs = {job.name: job.function for job in maintenance.list_jobs(db)}
    assert set(jobs) == set(JOBS_BY_NAME)
    for name, function in jobs.items():
        spec = JOBS_BY_NAME[name]
        assert spec.function == function
        source = sql_dir().joinpath("maintenance", spec.file).read_text()
        assert f"-- function: {function}" in source


def test_every_setting_is_described_and_its_default_is_valid(
    db: psycopg.Connection[Any],
) -> None:
    settings = {setting.name: setting.value for setting in maintenance.list_settings(db)}
    assert set(settings) == set(SETTINGS)
    for name, value in settings.items():
        SETTINGS[name].validate(value)


def test_a_value_out_of_range_is_refused_and_nothing_is_written(
    db: psycopg.Connection[Any],
) -> None:
    db.autocommit = True
    before = {s.name: s.value for s in maintenance.list_settings(db)}["prune_batch_size"]
    with pytest.raises(SettingError) as refused:
        maintenance.set_setting(db, "prune_batch_size", 0)
    assert refused.value.setting == "prune_batch_size"
    with pytest.raises(UnknownMaintenanceItemError):
        maintenance.set_setting(db, "no_such_setting", 1)
    after = {s.name: s.value for s in maintenance.list_settings(db)}["prune_batch_size"]
    assert after == before
    assert maintenance.set_setting(db, "prune_batch_size", 250).value == 250


def test_run_now_runs_that_job_alone_and_returns_its_result(db: psycopg.Connection[Any]) -> None:
    db.autocommit = True
    before = {job.name: job.run_count for job in maintenance.list_jobs(db)}
    result = maintenance.run_now(db, "promote_delayed_runs")
    assert isinstance(result, dict)
    after = {job.name: job.run_count for job in maintenance.list_jobs(db)}
    assert {name for name in after if after[name] != before[name]} == {"promote_delayed_runs"}
    with pytest.raises(UnknownMaintenanceItemError):
        maintenance.run_now(db, "no_such_job")
