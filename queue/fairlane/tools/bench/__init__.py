"""``fairlane bench``: enqueue, drain and pickup-latency figures, each on a fresh database.

Every scenario creates its own database on the server it is given, migrates it, runs, drops
it, and prints exactly one JSON line on stdout; logs go to stderr. The numbers are figures to
compare side by side with other queues on the same server, not pass/fail thresholds.
"""
