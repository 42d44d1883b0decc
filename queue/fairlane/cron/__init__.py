"""Cron schedules: the expressions (``expressions``), the firing of due ticks by every worker
(``firing``) and the schedule functions (``api``), public as ``fairlane.schedules``."""
