"""Tooling around the library: the demo, the embedded PostgreSQL server, the benchmarks."""
