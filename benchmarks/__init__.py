"""Benchmarks: see benchmarks/engine.py."""
