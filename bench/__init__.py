"""Benchmarks that hold the bars of DESIGN.md; each module runs with ``python -m bench.<name>``."""
