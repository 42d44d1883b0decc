"""The schema objects of ``sql/`` (functions, procedures, triggers) as the installer reads
them: their definitions, rendered for a schema. Named statements are the sections' business."""

from fairlane.engine.sqlfiles import Entry, object_entries, render

__all__ = ["Entry", "object_entries", "render"]
