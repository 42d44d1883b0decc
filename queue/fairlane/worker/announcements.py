"""The environments that notifications said gained work, since the worker's last claim.

Every trigger notifies with its environment's name. A worker used to answer any notification
with a full scan, a walk of the queued index that visits every environment with queued runs: with
thousands of tenants and a steady flow of triggers, nearly every claim paid for it. Instead the
worker keeps the names it heard and sends them with its next claim, which looks at those
environments alone (sql/claim/claim.sql, ``announced_environments``). A full scan is still made
when the names are too many to be worth sending, after a reconnect (which notifications were
missed is unknown) and once per poll interval as the safety net.
"""

from __future__ import annotations

from fairlane.worker.notifier import ANY_ENVIRONMENT

# Past this many environments in one claim's interval a full scan is cheaper to send.
MAX_ANNOUNCED = 256


class Announcements:
    """The environments announced since the last claim, or that a full scan is owed."""

    def __init__(self, limit: int = MAX_ANNOUNCED) -> None:
        self._limit = limit
        self._names: set[str] = set()
        self.scan_owed = False

    def heard(self, environment: str) -> None:
        """A notification named ``environment`` (or any, after a reconnect)."""
        if environment == ANY_ENVIRONMENT or len(self._names) >= self._limit:
            self.scan_owed = True
            self._names.clear()
        elif not self.scan_owed:
            self._names.add(environment)

    def take(self, full_scan: bool) -> list[str]:
        """The names to send with the next claim; none with a full scan, which finds them."""
        names = [] if full_scan else sorted(self._names)
        self._names.clear()
        if full_scan:
            self.scan_owed = False
        return names

    def give_back(self, names: list[str]) -> None:
        """A claim that failed: its names are owed to the next one."""
        for name in names:
            self.heard(name)
