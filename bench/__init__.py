"""Benchmarks that hold the bars of docs/benchmarks.md.

Each module runs with ``python -m bench.<name>``.
"""
