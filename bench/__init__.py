"""Benchmarks that hold the project's performance bars (docs/benchmarks.md); each module
runs with ``python -m bench.<name>``."""
