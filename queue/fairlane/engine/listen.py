"""The channels a worker listens on (sql/worker/listen.sql), and their names, by which a
notification tells which one it came on."""

from __future__ import annotations

from fairlane.engine.section import Section
from fairlane.engine.sqlfiles import (
    cancel_channel_name,
    channel_name,
    finished_channel_name,
    resume_channel_name,
)
from fairlane.engine.statement import Statement, no_rows


class Listen(Section):
    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        self.runs_channel = channel_name(schema)
        self.cancel_channel = cancel_channel_name(schema)
        self.resume_channel = resume_channel_name(schema)
        self.finished_channel = finished_channel_name(schema)

    def runs(self) -> Statement[None]:
        """New claimable runs (payload: the environment)."""
        return self._statement("listen_channel", None, no_rows)

    def cancels(self) -> Statement[None]:
        """Cancelled runs that were executing or waiting (payload: the run id)."""
        return self._statement("listen_cancel_channel", None, no_rows)

    def resumes(self) -> Statement[None]:
        """Waiting runs ready to resume (payload: the run id)."""
        return self._statement("listen_resume_channel", None, no_rows)

    def finished(self) -> Statement[None]:
        """Watched runs that ended (payload: the run id): ``wait_for_run``."""
        return self._statement("listen_finished_channel", None, no_rows)
