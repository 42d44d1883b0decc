"""Scheduling settings: caps, pauses, size limits, the fair scheduler's knobs, the rate limit."""
