"""Benchmarks: ``python -m benchmarks`` (see benchmarks/__main__.py)."""
