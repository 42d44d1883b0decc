"""What a worker sends with its claims after notifications (worker/announcements.py)."""

from __future__ import annotations

from fairlane.worker.announcements import Announcements
from fairlane.worker.notifier import ANY_ENVIRONMENT


def test_the_names_heard_go_with_the_next_claim_once() -> None:
    announced = Announcements()
    announced.heard("acme")
    announced.heard("globex")
    announced.heard("acme")
    assert announced.take(full_scan=False) == ["acme", "globex"]
    assert announced.take(full_scan=False) == []


def test_a_full_scan_sends_no_names_and_settles_the_scan_owed() -> None:
    announced = Announcements()
    announced.heard(ANY_ENVIRONMENT)
    assert announced.scan_owed
    announced.heard("acme")
    assert announced.take(full_scan=True) == []
    assert not announced.scan_owed


def test_an_environment_named_like_a_wildcard_is_a_name() -> None:
    announced = Announcements()
    announced.heard("*")
    assert not announced.scan_owed
    assert announced.take(full_scan=False) == ["*"]


def test_too_many_names_owe_a_full_scan_instead() -> None:
    announced = Announcements(limit=3)
    for name in ("a", "b", "c", "d"):
        announced.heard(name)
    assert announced.scan_owed
    assert announced.take(full_scan=False) == []


def test_the_names_of_a_failed_claim_are_owed_to_the_next() -> None:
    announced = Announcements()
    announced.heard("acme")
    names = announced.take(full_scan=False)
    announced.give_back(names)
    assert announced.take(full_scan=False) == ["acme"]
